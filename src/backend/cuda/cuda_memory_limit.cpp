// The count of device memory against the process's limit (cuda_memory_limit.h).
#include "backend/cuda/cuda_memory_limit.h"

#include <atomic>

#include "backend/device_memory_limit.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

std::atomic<size_t> counted_bytes{0};

}  // namespace

std::optional<size_t> device_memory_limit() {
  const std::optional<DeviceMemoryLimit> limit = device_memory_limit_setting();
  return limit ? std::optional<size_t>(limit->bytes) : std::nullopt;
}

size_t device_memory_counted() { return counted_bytes.load(); }

void charge_device_memory(size_t bytes, int device, const char* what) {
  const size_t before = counted_bytes.fetch_add(bytes);
  const std::optional<DeviceMemoryLimit> limit = device_memory_limit_setting();
  if (!limit || before + bytes <= limit->bytes) return;
  counted_bytes.fetch_sub(bytes);
  fail("cuda: out of memory on device ", device, " (rank ", process_rank(), "): cannot allocate ", bytes,
       " bytes for ", what, "; zerotune holds ", before, " bytes of the device, its limit is ", limit->bytes,
       " bytes (", limit->source, "; lower the micro-batch size or sequence length, or use "
       "ZeRO/offload/activation checkpointing)");
}

void uncharge_device_memory(size_t bytes) { counted_bytes.fetch_sub(bytes); }

}  // namespace zt::cuda
