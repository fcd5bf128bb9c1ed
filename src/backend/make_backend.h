// The backend a run computes on: `--device cpu` (OpenBLAS + OpenMP) or `--device cuda` (the
// CUDA backend on GPU local_rank % visible devices, as DESIGN.md fixes).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"

namespace zt {

std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank);

// Device memory in use now and at its peak (bytes) for a CUDA backend; empty for the CPU.
struct DeviceMemory {
  int64_t in_use = 0;
  int64_t peak = 0;
};
std::optional<DeviceMemory> device_memory(const Backend& backend);

}  // namespace zt
