// PhysicalPool: when the discarded extents of a device's discardable buffers (chunk_residency.h)
// give their physical memory back, and which new extent reuses it. Pure bookkeeping, shared by
// the CUDA backend's virtual memory (cuda/cuda_vmm.h), which maps and unmaps what it decides,
// and the counting backend (counting_backend.h), which counts it for the memory model: both hold
// the same bytes at every moment, whatever the device's timing.
//
// The rule. A discarded extent is held (still mapped, its physical memory counted) until a later
// commit needs memory ("a mapping commit"). At a mapping commit, the extents discarded before
// the previous mapping commit are reusable: each extent the commit needs takes the physical
// memory of a reusable extent of the same size (oldest first); only one that finds none takes
// new memory, and for it the commit first gives back reusable extents left over, oldest first,
// at least as many bytes as it takes (all of them when they are fewer). Extents discarded since
// the previous mapping commit stay held: the device may still be using them (ZeRO-3 releases
// unit k just before it prefetches unit k + 2), so the commit does not wait for them; it waits
// at most for work queued before the previous mapping commit. A held extent committed again is
// simply in use again. At a synchronisation (the backend's synchronize(): the ops that return a
// value to the host, a download, an upload past the pinned staging; not a staged upload or a
// queued copy to or from pinned host memory; the counting backend mirrors each) the device has
// finished everything: every held extent becomes reusable then.
//
// What it costs: the held bytes grow only at a commit that finds no reusable extent left over to
// give back, and then the device holds, beyond the extents in use and the new ones, only those
// discarded since the previous mapping commit: in a ZeRO-3 step one unit more than it uses
// (units of equal size reuse each other's memory two mapping commits later). Reusable extents a
// commit did not need (a gradient range between two parameter gathers) wait for a later commit
// of their size; between steps the last reduced gradients are held (taken again, with no driver
// call, by the next step's gradient commits when nothing took their memory in between).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/chunk_residency.h"

namespace zt {

class PhysicalPool {
 public:
  struct Held {  // a discarded extent whose physical memory is not given back yet
    ChunkResidency* residency = nullptr;
    Extent extent;
    uint64_t epoch = 0;  // mapping commits before its discard
  };
  struct Plan {
    // Per extent a commit needs: the held extent whose physical memory it takes (same size), or
    // none: new memory.
    std::vector<std::optional<Held>> sources;
    std::vector<Held> released;  // held extents whose physical memory is given back
  };

  // `residency`'s discard() returned `extents`: they are held (those held already stay as they are).
  void discarded(ChunkResidency* residency, const std::vector<Extent>& extents);
  // A commit of `residency` needs `needed` (its commit() result, not empty): see the rule above.
  // The caller gives back the sources and the released extents (set_mapped false), then maps
  // `needed`.
  Plan plan_commit(const std::vector<Extent>& needed);
  // Forgets held extents committed again (in use now): called after every commit, so that an
  // extent used and discarded again is held anew from its new discard.
  void drop_live();
  // The device has finished all work queued so far: every held extent is reusable.
  void synchronized();
  // Forgets the held extents of a released buffer.
  void forget(const ChunkResidency* residency);
  bool holds(const ChunkResidency* residency, Extent extent) const;

 private:
  std::vector<Held> held_;      // in the order of their discards
  uint64_t mapping_commits_ = 1;  // epoch 0: held extents made reusable by a synchronisation
};

}  // namespace zt
