// HostStaging (see cuda_host_staging.h).
#include "backend/cuda/cuda_host_staging.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace zt::cuda {

namespace {
constexpr size_t kAlignment = 256;  // each upload's start in a block (DMA-friendly, as cudaMalloc's)
size_t round_up(size_t value, size_t granule) { return (value + granule - 1) / granule * granule; }
}  // namespace

HostStaging::~HostStaging() {
  // Destructors must not throw: failures (a lost device) are ignored.
  for (Block& block : blocks_) {
    if (block.last_use) cudaEventDestroy(block.last_use);
    if (block.data) cudaFreeHost(block.data);
  }
}

void HostStaging::upload(void* device, const void* host, size_t bytes) {
  ZT_CHECK(bytes <= kMaxUploadBytes, "host staging: an upload of ", bytes, " bytes is larger than its limit of ",
           kMaxUploadBytes);
  if (bytes == 0) return;
  if (blocks_.empty() || offset_ + bytes > blocks_[current_].bytes) {
    current_ = reusable_block(bytes);
    offset_ = 0;
  }
  Block& block = blocks_[current_];
  char* staged = block.data + offset_;
  std::memcpy(staged, host, bytes);
  ZT_CUDA_CHECK(cudaMemcpyAsync(device, staged, bytes, cudaMemcpyHostToDevice, stream_));
  ZT_CUDA_CHECK(cudaEventRecord(block.last_use, stream_));
  offset_ += round_up(bytes, kAlignment);
}

size_t HostStaging::reusable_block(size_t bytes) {
  // Blocks in rotation order after the current one: the oldest transfers first.
  const size_t count = blocks_.size();
  for (size_t k = 1; k <= count; ++k) {
    const size_t index = (current_ + k) % count;
    if (blocks_[index].bytes < bytes) continue;
    const cudaError_t status = cudaEventQuery(blocks_[index].last_use);
    if (status == cudaSuccess) return index;
    if (status != cudaErrorNotReady) ZT_CUDA_CHECK(status);
  }
  const size_t new_bytes = std::max(kBlockBytes, round_up(bytes, kAlignment));
  if (total_bytes_ + new_bytes > kMaxTotalBytes) {
    // The host runs kMaxTotalBytes of uploads ahead of the GPU: wait for the oldest block that fits.
    for (size_t k = 1; k <= count; ++k) {
      const size_t index = (current_ + k) % count;
      if (blocks_[index].bytes < bytes) continue;
      ZT_CUDA_CHECK(cudaEventSynchronize(blocks_[index].last_use));
      return index;
    }
  }
  Block block;
  block.bytes = new_bytes;
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&block.last_use, cudaEventDisableTiming));
  const cudaError_t status = cudaHostAlloc(reinterpret_cast<void**>(&block.data), new_bytes, cudaHostAllocDefault);
  if (status != cudaSuccess) {
    cudaEventDestroy(block.last_use);
    cudaGetLastError();  // handled here: not the next launch's error
    fail("host staging: cannot allocate ", new_bytes, " bytes of pinned host memory for uploads (",
         cudaGetErrorString(status), "; ", total_bytes_, " bytes held already)");
  }
  blocks_.push_back(block);
  total_bytes_ += new_bytes;
  return blocks_.size() - 1;
}

}  // namespace zt::cuda
