// The CUDA backend's memory rules as plain arithmetic, in every build: the caching allocator's
// size classes, the cuBLASLt workspace each backend holds, a current GPU's virtual-memory
// granularity. The memory model's typical GPU (memory_model.h typical_gpu_target) uses them, so a
// build without CUDA (planning on a login node) predicts a GPU run exactly as a CUDA build does,
// and the CUDA backend's CachingAllocator rounds by the same function.
#pragma once
#include <cstdint>

namespace zt {

constexpr int64_t kCudaWorkspaceBytes = int64_t{32} << 20;         // the cuBLASLt workspace each backend holds
constexpr int64_t kTypicalDiscardChunkBytes = int64_t{2} << 20;  // cuMemGetAllocationGranularity on current GPUs
constexpr int64_t kAllocatorSmallGranule = 512;                  // requests below 1 MiB: multiples of 512 B
constexpr int64_t kAllocatorLargeThreshold = int64_t{1} << 20;
constexpr int64_t kAllocatorLargeGranule = int64_t{2} << 20;     // from 1 MiB: multiples of 2 MiB
// copy() from host memory to the device: an upload of at most this many bytes goes through the
// pinned staging blocks (cuda_host_staging.h) and queues without waiting for the device; a larger
// one waits. The counting backend follows the same rule (where the device is waited for, the
// held virtual-memory extents become reusable: physical_pool.h).
constexpr int64_t kHostStagingMaxUploadBytes = int64_t{64} << 20;

// The bytes the caching allocator gives a request of `bytes` (0 and negative count as 1).
int64_t cuda_allocation_size(int64_t bytes);

}  // namespace zt
