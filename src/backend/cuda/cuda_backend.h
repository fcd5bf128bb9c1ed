// The CUDA backend's public face: make_cuda_backend() and the memory figures the trainer puts
// in metrics.jsonl. Free of CUDA headers, so any part of zerotune can include it (when the
// build has ZT_WITH_CUDA=1). The implementation is CudaBackendImpl (cuda_backend_impl.h).
//
// Dtypes: every op takes the fp32, bf16 and fp16 views the rules at the top of backend.h allow
// (what is particular to the CUDA backend is at the top of cuda_backend_impl.h). Arithmetic is
// in fp32 whatever the storage dtype; loss sums and gradient sums of squares accumulate in
// double, a norm's per-row statistics in fp32 (backend.h says why that is the contract).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/gpu_memory_rules.h"
#include "backend/backend.h"

namespace zt {

struct CudaBackendOptions {
  // fp32 GEMMs on TF32 tensor cores (10-bit mantissa inputs): faster, about 1e-3 relative
  // error. Off by default, as in PyTorch (torch.backends.cuda.matmul.allow_tf32 = False).
  bool allow_tf32 = false;
  // The caching allocator (see cuda_allocator.h). Unset: on, unless the environment has
  // ZT_CUDA_CACHING_ALLOCATOR=0 (every buffer its own cudaMalloc, for the sanitizers).
  std::optional<bool> caching_allocator;
};

class CudaBackend : public Backend {
 public:
  // Device memory handed out by allocate() now, its peak since construction or reset_peak(),
  // and what the caching allocator holds from the driver (in use + cached), in bytes.
  virtual size_t memory_in_use() const = 0;
  virtual size_t memory_peak() const = 0;
  virtual void reset_peak() = 0;
  virtual size_t memory_reserved() const = 0;
  // The device's own figures (cudaMemGetInfo): bytes in use by anyone, and free.
  virtual size_t device_memory_used() const = 0;
  virtual size_t device_memory_free() const = 0;
  // Bytes of the physical chunks discardable buffers hold now (part of memory_in_use), and the
  // chunk size (0 when the device has no virtual memory management: discard gives nothing back).
  virtual size_t discardable_bytes() const = 0;
  virtual size_t discardable_peak() const = 0;  // since construction or reset_peak()
  virtual size_t discard_granularity() const = 0;
  // The bytes an allocate(bytes) takes from the device (the caching allocator's size class).
  virtual int64_t allocation_size(int64_t bytes) const = 0;
  // cudaMalloc calls so far: constant across steady-state training steps.
  virtual size_t device_allocations() const = 0;
  // Waits for all queued work; errors raised by kernels surface here (ops that return values
  // to the host synchronise by themselves).
  virtual void synchronize() = 0;
  virtual int device_index() const = 0;
  // cuBLASLt plans cached now (bounded) and heuristic queries so far (cuda_gemm.cpp).
  virtual size_t gemm_plans_cached() const = 0;
  virtual size_t gemm_heuristic_queries() const = 0;
};

// The caching allocator's size classes, the workspace and the typical granularity:
// backend/gpu_memory_rules.h (in every build, for the memory model).

// The PCI bus id of visible device `device` ("0000:41:00.0"): what tells whether two ranks drive
// the same GPU, whatever CUDA_VISIBLE_DEVICES each has. Throws when there is no such device.
std::string cuda_device_pci_bus_id(int device);

// Number of CUDA devices this process can see; 0 when there is no GPU or no driver.
int cuda_device_count();

// A backend on device `device` (made current for this thread). Throws a zt::Error that says
// why when there is no such device or no usable driver.
std::unique_ptr<CudaBackend> make_cuda_backend(int device, CudaBackendOptions options = {});

}  // namespace zt
