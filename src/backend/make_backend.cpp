// Backend selection by name.
#include "backend/make_backend.h"

#if ZT_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
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

std::optional<DeviceMemory> device_memory(const Backend& backend) {
#if ZT_WITH_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend))
    return DeviceMemory{static_cast<int64_t>(cuda->memory_in_use()), static_cast<int64_t>(cuda->memory_peak()),
                        static_cast<int64_t>(cuda->discardable_peak())};
#else
  (void)backend;
#endif
  return std::nullopt;
}

std::optional<int64_t> device_bytes_used(const Backend& backend) {
#if ZT_WITH_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend)) return static_cast<int64_t>(cuda->device_memory_used());
#else
  (void)backend;
#endif
  return std::nullopt;
}

std::optional<int64_t> device_bytes_free(const Backend& backend) {
#if ZT_WITH_CUDA
  if (const auto* cuda = dynamic_cast<const CudaBackend*>(&backend)) return static_cast<int64_t>(cuda->device_memory_free());
#else
  (void)backend;
#endif
  return std::nullopt;
}

void reset_device_peak(Backend& backend) {
#if ZT_WITH_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) cuda->reset_peak();
#else
  (void)backend;
#endif
}

}  // namespace zt
