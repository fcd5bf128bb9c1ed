// The CUDA backend's caching device allocator (see cuda_allocator.h).
#include "backend/cuda/cuda_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/gpu_memory_rules.h"
#include "backend/cuda/cuda_memory_limit.h"
#include "core/error.h"

namespace zt::cuda {

namespace {
constexpr size_t kSmallGranule = static_cast<size_t>(kAllocatorSmallGranule);

}  // namespace

size_t CachingAllocator::rounded_size(size_t bytes) {
  return static_cast<size_t>(cuda_allocation_size(static_cast<int64_t>(bytes)));  // gpu_memory_rules.h
}

bool CachingAllocator::caching_by_default() {
  static const bool enabled = [] {
    const char* value = std::getenv("ZT_CUDA_CACHING_ALLOCATOR");
    if (value == nullptr || std::strcmp(value, "1") == 0) return true;
    ZT_CHECK(std::strcmp(value, "0") == 0, "ZT_CUDA_CACHING_ALLOCATOR must be 0 or 1, got '", value, "'");
    return false;
  }();
  return enabled;
}

CachingAllocator::~CachingAllocator() {
  // Destructors must not throw: errors here (a device already lost) are ignored.
  for (auto& [size, block] : free_blocks_) {
    cudaFree(block);
    uncharge_device_memory(size);
  }
  for (auto& [block, size] : live_blocks_) {
    cudaFree(block);
    uncharge_device_memory(size);
  }
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  if (!caching_) {
    void* exact = device_malloc(std::max<size_t>(bytes, 1));
    bytes_reserved_ += size - std::max<size_t>(bytes, 1);  // accounted in size classes as when caching
    live_blocks_.emplace(exact, size);
    bytes_in_use_ += size;
    peak_bytes_ = std::max(peak_bytes_, bytes_in_use_);
    return exact;
  }
  // Best fit among cached blocks, if it wastes at most a quarter of the request (no splitting:
  // a large cached block is not spent on a small request).
  auto fit = free_blocks_.lower_bound(size);
  void* block = nullptr;
  size_t block_size = size;
  if (fit != free_blocks_.end() && fit->first - size <= std::max(size / 4, kSmallGranule)) {
    block = fit->second;
    block_size = fit->first;
    free_blocks_.erase(fit);
  } else {
    block = device_malloc(size);
  }
  live_blocks_.emplace(block, block_size);
  bytes_in_use_ += block_size;
  peak_bytes_ = std::max(peak_bytes_, bytes_in_use_);
  return block;
}

void CachingAllocator::release(void* pointer) {
  if (pointer == nullptr) return;
  auto live = live_blocks_.find(pointer);
  ZT_CHECK(live != live_blocks_.end(), "cuda allocator: release of ", pointer,
           ", which is not a live block of this backend (double release, or host memory?)");
  bytes_in_use_ -= live->second;
  if (caching_) {
    free_blocks_.emplace(live->second, pointer);
  } else {
    ZT_CUDA_CHECK(cudaFree(pointer));
    uncharge_device_memory(live->second);
    bytes_reserved_ -= live->second;
  }
  live_blocks_.erase(live);
}

void CachingAllocator::empty_cache() {
  for (auto& [size, block] : free_blocks_) {
    ZT_CUDA_CHECK(cudaFree(block));
    uncharge_device_memory(size);
    bytes_reserved_ -= size;
  }
  free_blocks_.clear();
}

void* CachingAllocator::device_malloc(size_t bytes) {
  if (device_memory_limit() && device_memory_counted() + bytes > *device_memory_limit()) {
    empty_cache();  // as for a full device below: the cache may hold the bytes in blocks of the wrong sizes
  }
  charge_device_memory(bytes, device_, "a buffer");  // throws past the device-memory limit
  void* pointer = nullptr;
  cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status == cudaErrorMemoryAllocation && !free_blocks_.empty()) {
    // The cache may hold enough in blocks of the wrong sizes: give them back and try again.
    cudaGetLastError();  // clear the (non-sticky) error
    empty_cache();
    status = cudaMalloc(&pointer, bytes);
  }
  if (status != cudaSuccess) uncharge_device_memory(bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    ZT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    fail("cuda: out of memory on device ", device_, " (rank ", process_rank(), "): cannot allocate ",
         bytes, " bytes; zerotune holds ", bytes_in_use_, " bytes in use, the device has ",
         free_bytes, " of ", total_bytes, " bytes free (lower the micro-batch size or sequence "
         "length, or use ZeRO/offload/activation checkpointing)");
  }
  ZT_CUDA_CHECK(status);
  ++device_allocations_;
  bytes_reserved_ += bytes;
  return pointer;
}

}  // namespace zt::cuda
