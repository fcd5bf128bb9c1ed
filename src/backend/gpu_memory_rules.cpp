// The CUDA backend's memory rules (see gpu_memory_rules.h).
#include "backend/gpu_memory_rules.h"

namespace zt {

int64_t cuda_allocation_size(int64_t bytes) {
  const int64_t request = bytes < 1 ? 1 : bytes;
  const int64_t granule = request < kAllocatorLargeThreshold ? kAllocatorSmallGranule : kAllocatorLargeGranule;
  return (request + granule - 1) / granule * granule;
}

}  // namespace zt
