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

}  // namespace zt
