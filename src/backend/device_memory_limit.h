// The device-memory limit of this process: `--device-memory-limit SIZE` (train, selftest,
// autotune) or the environment's ZT_DEVICE_MEMORY_LIMIT, the flag winning. The CUDA backend
// honours it alike on a real GPU and on the emulated device (backend/cuda/cuda_memory_limit.h
// counts what it takes against it), so that a test or a user can make a large GPU behave as a
// small one. Here in every build, so that a CPU-only zerotune parses the flag the same way.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace zt {

struct DeviceMemoryLimit {
  size_t bytes = 0;
  std::string source;  // "--device-memory-limit" or "ZT_DEVICE_MEMORY_LIMIT", for messages
};

// `text` as a memory size: bytes ("1073741824") or a number with a binary unit ("12GiB",
// "512MiB", "64KiB"); anything else, and 0, is a zt::Error naming `name` and the value.
size_t parse_memory_size(const std::string& name, const std::string& text);

// Sets the limit from the command line (`source` names the flag). Call before the backend takes
// any device memory: the limit must not change during a run.
void set_device_memory_limit(size_t bytes, const std::string& source);

// The limit: the one set, else ZT_DEVICE_MEMORY_LIMIT (read once; unset or empty: none).
std::optional<DeviceMemoryLimit> device_memory_limit_setting();

}  // namespace zt
