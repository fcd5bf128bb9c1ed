// Backend selection by name.
#include "backend/make_backend.h"

#include <cstdlib>
#include <type_traits>

#include "core/error.h"

#if ZT_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_memory_limit.h"
#endif

namespace zt {

std::unique_ptr<Backend> make_backend(const std::string& device, int local_rank) {
  if (device == "cpu") return make_cpu_backend();
  ZT_CHECK(device == "cuda", "--device '", device, "' is not cpu or cuda");
#if ZT_WITH_CUDA
  const int count = cuda_device_count();
  ZT_CHECK(count > 0, "--device cuda: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, driver)");
  return make_cuda_backend(local_rank % count);
#else
  (void)local_rank;
  fail("--device cuda: this zerotune was built without the CUDA backend (configure with -DZT_CUDA=ON where nvcc "
       "is installed)");
#endif
}

DeviceChoice resolve_device(const std::string& requested, int local_rank) {
  ZT_CHECK(requested == "auto" || requested == "cpu" || requested == "cuda", "--device must be auto, cpu or cuda, not '",
           requested, "'");
  if (requested == "cpu") return {"cpu", "--device cpu"};
#if ZT_WITH_CUDA
  const int count = cuda_device_count();
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  if (count == 0) {
    const std::string why = cat("no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES ",
                                mask ? cat("'", mask, "'") : std::string("unset"), "; or no NVIDIA driver)");
    ZT_CHECK(requested == "auto", "--device cuda: ", why);
    return {"cpu", "auto: " + why};
  }
  const int device = local_rank % count;
  return {"cuda", cat(requested == "auto" ? "auto: " : "--device cuda: ", count, " CUDA device", count == 1 ? "" : "s",
                      " visible; this rank uses device ", device, " (local rank ", local_rank, " % ", count, ", PCI ",
                      cuda_device_pci_bus_id(device), ")")};
#else
  (void)local_rank;
  ZT_CHECK(requested == "auto", "--device cuda: this zerotune was built without the CUDA backend (configure with "
           "-DZT_CUDA=ON where nvcc is installed)");
  return {"cpu", "auto: this zerotune was built without the CUDA backend"};
#endif
}

std::string backend_pci_bus_id(const Backend& backend) {
#if ZT_WITH_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend)) return cuda_device_pci_bus_id(cuda->device_index());
#else
  (void)backend;
#endif
  return "";
}

// f(the CUDA backend behind `backend`), or nothing for the CPU backend or a build without CUDA.
template <class Result, class Function>
std::optional<Result> on_cuda(const Backend& backend, Function f) {
#if ZT_WITH_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend)) return f(*cuda);
#else
  (void)backend;
  (void)f;
#endif
  return std::nullopt;
}

std::optional<DeviceMemory> device_memory(const Backend& backend) {
  return on_cuda<DeviceMemory>(backend, [](const auto& cuda) {
    return DeviceMemory{static_cast<int64_t>(cuda.memory_in_use()), static_cast<int64_t>(cuda.memory_peak()),
                        static_cast<int64_t>(cuda.discardable_peak())};
  });
}

std::optional<int64_t> device_bytes_used(const Backend& backend) {
  return on_cuda<int64_t>(backend, [](const auto& cuda) { return static_cast<int64_t>(cuda.device_memory_used()); });
}

std::optional<int64_t> device_bytes_free(const Backend& backend) {
  return on_cuda<int64_t>(backend, [](const auto& cuda) { return static_cast<int64_t>(cuda.device_memory_free()); });
}

std::optional<DeviceMemoryAccount> device_memory_account(const Backend& backend) {
#if ZT_WITH_CUDA
  return on_cuda<DeviceMemoryAccount>(backend, [](const auto& cuda) {
    const std::optional<size_t> limit = cuda::device_memory_limit();
    return DeviceMemoryAccount{static_cast<int64_t>(cuda.discard_granularity()),
                              limit ? static_cast<int64_t>(*limit) : int64_t{0},
                               static_cast<int64_t>(cuda::device_memory_counted())};
  });
#else
  (void)backend;
  return std::nullopt;
#endif
}

void reset_device_peak(Backend& backend) {
  on_cuda<bool>(backend, [](const auto& cuda) {
    const_cast<std::remove_cvref_t<decltype(cuda)>&>(cuda).reset_peak();  // the peak is bookkeeping, not state
    return true;
  });
}

}  // namespace zt
