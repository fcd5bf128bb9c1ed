// DiscardableMemory: device buffers whose pages ZeRO gives back and takes again while keeping
// the buffer's addresses (Backend::allocate_discardable, discard, commit), built on CUDA's
// virtual memory management: the whole buffer is one reserved virtual range, and physical
// memory is mapped into it chunk by chunk (one cuMemCreate of the granularity, 2 MiB on current
// GPUs, per chunk, so that any chunk can be unmapped alone). A stage-3 parameter buffer or a
// stage-2/3 gradient buffer thus stays one flat range (the layout every collective and
// partition slice relies on) while the device holds only the chunks of the units in use.
//
// Why virtual memory rather than gather buffers: the flat layout of param_store.h (a unit is a
// range, partition r a plain slice, a bucket of units one contiguous collective) stays exactly as
// on the CPU, where discard is madvise; gather buffers would give the stage-3 parameters a
// second layout and every user of a parameter view an indirection.
//
// Ordering: a discarded chunk may still be read or written by queued work, so discard() only
// marks it, with an event recorded on the stream; the chunk is unmapped and its physical memory
// released once that event has completed: at the next commit() (which waits for the pending
// events, so that the device never holds discarded chunks next to newly committed ones), or at
// reclaim(). commit() of a chunk whose discard is still pending just keeps it (its contents are
// unspecified either way). A chunk counts as discarded when the discarded ranges cover all of
// it: two neighbouring units discarded one after the other free the chunk they share.
//
// The driver entry points come from cudaGetDriverEntryPointByVersion, so zerotune does not link
// libcuda (the CPU-only runs of a CUDA build need no driver). Without virtual memory support
// (the attribute, or no entry points) allocate() returns nullptr and the backend falls back to
// plain allocations, where discard gives nothing back.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/chunk_residency.h"

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

  // A range of `bytes` (rounded up to the granularity), all of it mapped; nullptr when virtual
  // memory is not supported. Throws a zt::Error naming the device when memory runs out.
  // `committed` false: nothing mapped yet (commit maps what is written).
  void* allocate(size_t bytes, bool committed = true);
  bool owns(const void* pointer) const;      // the base of a live range
  bool contains(const void* pointer) const;  // inside a live range
  void release(void* pointer);           // synchronises the stream first
  // [pointer, pointer + bytes) inside one range: see the ordering rules above.
  void discard(const void* pointer, size_t bytes);
  void commit(const void* pointer, size_t bytes);
  // Unmaps the chunks whose discard has completed (waiting for it when `wait`).
  void reclaim(bool wait);

  size_t physical_bytes() const { return physical_bytes_; }  // mapped chunks, pending ones included
  size_t peak_physical_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = physical_bytes_; }

 private:
  struct Range {
    size_t bytes = 0;                                 // reserved, a multiple of the granularity
    std::vector<unsigned long long> handles;          // per chunk: CUmemGenericAllocationHandle, 0: none
    std::vector<uint64_t> discard_seq;                // per chunk: the discard that marked it (0: none)
    std::unique_ptr<ChunkResidency> residency;
  };
  struct PendingDiscard {
    cudaEvent_t event = nullptr;  // recorded after the work that may touch the chunks
    uint64_t seq = 0;
  };

  Range& range_of(const void* pointer, size_t bytes, const char* call, uintptr_t* base);
  void map_chunk(uintptr_t base, Range& range, size_t index);
  void unmap_chunk(uintptr_t base, Range& range, size_t index);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool supported_ = false;
  std::string unsupported_reason_;
  size_t granularity_ = 0;
  std::map<uintptr_t, Range> ranges_;  // base -> range
  std::vector<PendingDiscard> pending_;
  uint64_t next_seq_ = 1;
  size_t physical_bytes_ = 0, peak_bytes_ = 0;
  struct Driver;
  std::unique_ptr<Driver> driver_;
};

}  // namespace zt::cuda
