// HostStaging: pinned host blocks through which small host -> device copies go, so that copy()
// returns at once without synchronising the stream (issue 30: a step that never waits).
//
// Why: copy()'s contract is "the host side may be reused when copy() returns". A
// cudaMemcpyAsync from PINNED memory reads its source later (DMA), and one from PAGEABLE memory
// stages it through the driver's own buffers but may also wait for the device; the backend used
// to synchronise the stream after every upload, so every micro-batch's 4-5 uploads (ids, targets,
// mask, row ids, positions) drained the GPU before its forward. Here the host bytes are copied
// into a pinned block first (a memcpy of a few KiB to MiB), the transfer is queued from there,
// and the caller's memory is free at once.
//
// Reuse: a block is written front to back; an event recorded after each transfer marks the
// block's last use. When the current block is full, the next one is any block whose last use
// has completed (cudaEventQuery: the host never waits for it), else a new block. Only when the
// blocks already hold kMaxTotalBytes (the host runs that far ahead of the GPU) does the host wait
// for the oldest one, so pinned memory stays bounded.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/gpu_memory_rules.h"

namespace zt::cuda {

class HostStaging {
 public:
  static constexpr size_t kBlockBytes = size_t{4} << 20;       // a new block's size (larger uploads get their own)
  static constexpr size_t kMaxUploadBytes = kHostStagingMaxUploadBytes;  // larger uploads synchronise instead (copy())
  static constexpr size_t kMaxTotalBytes = size_t{256} << 20;  // pinned bytes before the host waits

  explicit HostStaging(cudaStream_t stream) : stream_(stream) {}
  ~HostStaging();  // the caller synchronised the stream
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Copies `bytes` at `host` into a pinned block and queues their transfer to `device` on the
  // stream; returns at once, and `host` may be overwritten right away. bytes <= kMaxUploadBytes.
  void upload(void* device, const void* host, size_t bytes);

  size_t pinned_bytes() const { return total_bytes_; }  // held by the blocks (host memory)
  size_t blocks() const { return blocks_.size(); }

 private:
  struct Block {
    char* data = nullptr;
    size_t bytes = 0;
    cudaEvent_t last_use = nullptr;  // recorded after the block's latest transfer
  };
  // A block with room for `bytes` from its start, its previous transfers complete.
  size_t reusable_block(size_t bytes);

  cudaStream_t stream_;
  std::vector<Block> blocks_;
  size_t current_ = 0;   // the block being filled (blocks_ empty: none)
  size_t offset_ = 0;    // its first free byte
  size_t total_bytes_ = 0;
};

}  // namespace zt::cuda
