// The backend a run computes on: `--device cpu` (OpenBLAS + OpenMP) or `--device cuda` (the
// CUDA backend on GPU local_rank % visible devices, as DESIGN.md fixes).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"

namespace zt {

std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank);

// --device auto|cpu|cuda resolved on this rank: auto is cuda when the build has the CUDA backend
// and the process sees a GPU, else cpu. `reason` says which and why, for the banner and run.json
// ("auto: 4 CUDA devices visible; this rank uses device 1 (PCI 0000:41:00.0)").
struct DeviceChoice {
  std::string device;  // cpu | cuda
  std::string reason;
};
DeviceChoice resolve_device(const std::string& requested, int local_rank);
// The PCI bus id of the GPU a backend runs on; empty for the CPU.
std::string backend_pci_bus_id(const Backend& backend);

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
// What the memory a CUDA backend gets back and may take depends on: the virtual-memory chunk that discard
// frees (cuMemGetAllocationGranularity: 2 MiB on current GPUs, ZT_EMU_VMM_GRANULARITY on the
// emulated device; 0 without virtual memory management) and ZT_DEVICE_MEMORY_LIMIT (0: none).
// In run.json, so that tests size their models from the device they run on.
struct DeviceMemoryAccount {
  int64_t discard_granularity = 0;
  int64_t limit = 0;
  int64_t counted = 0;  // bytes this process holds from the driver now (what the limit counts)
};
std::optional<DeviceMemoryAccount> device_memory_account(const Backend& backend);
// Starts device_memory()'s peak again from what is held now (after set-up: the training peak).
void reset_device_peak(Backend& backend);

}  // namespace zt
