// The device-memory limit (--device-memory-limit or ZT_DEVICE_MEMORY_LIMIT,
// backend/device_memory_limit.h), honoured alike on a real GPU and on the emulated device, so that
// a test or a user can make a large GPU behave as a small one. What counts against it: every byte
// this process gets from the driver for its buffers (the caching allocator's cudaMalloc blocks,
// cached or in use, and the mapped virtual-memory chunks of discardable buffers): the figures the
// memory model predicts. The CUDA context and the buffers cuBLASLt, cuDNN and NCCL allocate for
// themselves come on top, as they do in the prediction. Counted per process, so ranks that share
// one GPU each get the limit.
// An allocation past the limit fails with the same "cuda: out of memory" error as a full GPU, and
// the device's free memory (device_memory_free(), the trainer's check before the first step) is
// at most the limit less what is counted.
#pragma once
#include <cstddef>
#include <optional>

namespace zt::cuda {

// The limit in bytes; nullopt: none.
std::optional<size_t> device_memory_limit();

// Bytes this process holds from the driver (counted by charge/uncharge).
size_t device_memory_counted();
// Counts `bytes` about to be taken from the driver for `what` on `device`; throws the
// out-of-memory error (naming the limit and where it was set) when they would pass the limit.
void charge_device_memory(size_t bytes, int device, const char* what);
void uncharge_device_memory(size_t bytes);

}  // namespace zt::cuda
