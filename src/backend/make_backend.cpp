// Backend selection by name.
#include "backend/make_backend.h"

#include <cstdlib>

#include "core/error.h"

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

}  // namespace zt
