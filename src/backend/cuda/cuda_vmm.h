// DiscardableMemory: device buffers whose pages ZeRO gives back and takes again while keeping
// the buffer's addresses (Backend::allocate_discardable, discard, commit), built on CUDA's
// virtual memory management: the whole buffer is one reserved virtual range, and physical
// memory is mapped into it by extent (chunk_residency.h): a commit maps the chunks it needs
// (chunks of the granularity, 2 MiB on current GPUs) as at most three extents (the chunk its
// first byte is in when the range starts inside it, the one of its last byte likewise, and the
// chunks between), each one physical allocation of the extent's size with one cuMemMap and one
// cuMemSetAccess; an extent is unmapped with one cuMemUnmap once discards cover all of it. A
// stage-3 parameter buffer or a stage-2/3 gradient buffer thus stays one flat range (the layout
// every collective and partition slice relies on) while the device holds only the extents of
// the units in use, and a step makes a few driver calls per unit, not one per chunk.
//
// Why virtual memory rather than gather buffers: the flat layout of param_store.h (a unit is a
// range, partition r a plain slice, a bucket of units one contiguous collective) stays exactly as
// on the CPU, where discard is madvise; gather buffers would give the stage-3 parameters a
// second layout and every user of a parameter view an indirection.
//
// The pool: physical allocations are reused, not created and released per commit. Which
// discarded extent's memory a commit reuses, and when memory goes back to the driver, is
// physical_pool.h's rule, which the memory model's counting backend applies too (so the model
// counts exactly the bytes this class holds): a discarded extent stays mapped and held; at a
// later commit that needs memory, the extents discarded before the previous such commit are
// reusable: a new extent of the same size takes one (cuMemUnmap there, cuMemMap here), and only
// an extent that finds none is created (cuMemCreate), after reusable ones left over, at least as
// many bytes, are released (cuMemRelease). In a ZeRO-3 step of equal-sized units this makes few
// cuMemCreate or cuMemRelease calls.
//
// Ordering: a discarded extent may still be read or written by queued work, so discard() only
// marks it, with an event recorded on the stream after that work. Unmapping it needs the event
// complete: by the rule above that is only asked of a discard made before the previous mapping
// commit (one ZeRO-3 unit back), which the device has normally finished (cudaEventQuery, not
// waiting); only if it has not does the commit wait for it (cudaEventSynchronize), because
// otherwise the device would hold more than the memory model predicts. commit() of an extent
// whose discard is still held just keeps it in use (its contents are unspecified either way).
// Synchronisations only forget completed events. Every driver call is checked, and its error
// names the call, the bytes and the address; a failure leaks nothing: a new allocation whose
// cuMemMap or cuMemSetAccess fails is unmapped and released, reused allocations not mapped yet
// are released, and a held extent whose cuMemUnmap fails stays mapped, in use, until its buffer
// is released.
//
// The driver entry points come from cudaGetDriverEntryPointByVersion, so zerotune does not link
// libcuda (the CPU-only runs of a CUDA build need no driver). Without virtual memory support
// (the attribute, or no entry points) allocate() returns nullptr and the backend falls back to
// plain allocations, where discard gives nothing back.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/chunk_residency.h"
#include "backend/physical_pool.h"

namespace zt::cuda {

class DiscardableMemory {
 public:
  DiscardableMemory(int device, cudaStream_t stream);
  ~DiscardableMemory();  // releases every range (the caller synchronised the stream)
  DiscardableMemory(const DiscardableMemory&) = delete;
  DiscardableMemory& operator=(const DiscardableMemory&) = delete;

  bool supported() const { return supported_; }
  std::string unsupported_reason() const { return unsupported_reason_; }
  size_t granularity() const { return granularity_; }

  // A range of `bytes` (rounded up to the granularity), all of it mapped as one extent (given
  // back only once all of it is discarded); nullptr when virtual memory is not supported. Throws
  // a zt::Error naming the call, the bytes and the device when memory runs out. `committed`
  // false: nothing mapped yet (commit maps what is written, extent by extent).
  void* allocate(size_t bytes, bool committed = true);
  bool owns(const void* pointer) const;      // the base of a live range
  bool contains(const void* pointer) const;  // inside a live range
  void release(void* pointer);           // synchronises the stream first
  // [pointer, pointer + bytes) inside one range: see the ordering rules above.
  void discard(const void* pointer, size_t bytes);
  void commit(const void* pointer, size_t bytes);
  // The stream was synchronised: every discard's event has completed.
  void synchronized();

  size_t physical_bytes() const { return physical_bytes_; }  // allocations held, discarded extents included
  size_t peak_physical_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = physical_bytes_; }

 private:
  struct Piece {                      // one mapped extent
    unsigned long long handle = 0;    // CUmemGenericAllocationHandle of the extent's size
    uint64_t discard_seq = 0;         // the event its unmapping waits for (set while it is held)
  };
  struct Range {
    size_t bytes = 0;                 // reserved, a multiple of the granularity
    std::unique_ptr<ChunkResidency> residency;
    std::map<size_t, Piece> pieces;   // first chunk -> its allocation, as residency->extents()
  };
  struct DiscardEvent {
    cudaEvent_t event = nullptr;      // recorded after the work that may touch the extents
    uint64_t seq = 0;
  };

  Range& range_of(const void* pointer, size_t bytes, const char* call, uintptr_t* base);
  std::pair<uintptr_t, Range*> range_holding(const ChunkResidency* residency);
  void check(int status, const char* call, uintptr_t address, size_t bytes) const;
  unsigned long long create(size_t bytes);
  int give_back(unsigned long long handle, size_t bytes);
  void map(uintptr_t at, size_t bytes, unsigned long long handle);
  void map_extents(uintptr_t base, Range& range, const std::vector<Extent>& extents,
                   std::vector<unsigned long long> handles);
  unsigned long long unmap_held(const PhysicalPool::Held& held);
  std::vector<unsigned long long> take_back(const PhysicalPool::Plan& plan);
  void unmap_all(uintptr_t base, Range& range);
  uint64_t record_discard();
  void wait_for(uint64_t seq);
  void forget_completed();

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool supported_ = false;
  std::string unsupported_reason_;
  size_t granularity_ = 0;
  std::map<uintptr_t, Range> ranges_;  // base -> range
  PhysicalPool pool_;                  // the discarded extents held, across ranges
  std::deque<DiscardEvent> events_;    // not known complete, in stream order
  uint64_t next_seq_ = 1, completed_seq_ = 0;
  size_t physical_bytes_ = 0, peak_bytes_ = 0;
  struct Driver;
  std::unique_ptr<Driver> driver_;
};

}  // namespace zt::cuda
