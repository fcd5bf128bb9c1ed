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
  int64_t store_peak = 0;  // of which: the discardable parameter and gradient buffers (ZeRO's flat store)
};
std::optional<DeviceMemory> device_memory(const Backend& backend);
// The device's own count of bytes in use (cudaMemGetInfo: total - free) and free; nullopt on the CPU.
std::optional<int64_t> device_bytes_used(const Backend& backend);
std::optional<int64_t> device_bytes_free(const Backend& backend);
// Starts device_memory()'s peak again from what is held now (after set-up: the training peak).
void reset_device_peak(Backend& backend);

}  // namespace zt
