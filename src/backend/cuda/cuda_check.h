// Checks for every CUDA runtime and cuBLASLt call: a failure throws zt::Error naming the call,
// the CUDA error, file:line and the rank, e.g.
//   "cuda: cudaMalloc(&pointer, bytes) failed at src/backend/cuda/cuda_allocator.cpp:60 on
//    rank 3: out of memory (cudaErrorMemoryAllocation)".
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace zt::cuda {

[[noreturn]] void fail_cuda_call(const char* call, cudaError_t status, const char* file, int line);
[[noreturn]] void fail_cublas_call(const char* call, cublasStatus_t status, const char* file,
                                   int line);

// ZT_CUDA_SYNC=1 (a debug mode, like CUDA_LAUNCH_BLOCKING=1): every launch is followed by a
// device synchronisation, so a fault inside a kernel is reported against that kernel and its
// launch site instead of at the next synchronising call. Read at every launch (cheap), so a
// process may switch it.
bool sync_after_each_launch();
// Synchronises the device and throws, naming `kernel_name` and file:line, if a kernel faulted.
void check_kernel_completed(const char* kernel_name, const char* file, int line);

}  // namespace zt::cuda

#define ZT_CUDA_CHECK(call)                                                            \
  do {                                                                                 \
    const cudaError_t zt_cuda_status = (call);                                         \
    if (zt_cuda_status != cudaSuccess)                                                 \
      ::zt::cuda::fail_cuda_call(#call, zt_cuda_status, __FILE__, __LINE__);           \
  } while (0)

#define ZT_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    const cublasStatus_t zt_cublas_status = (call);                                    \
    if (zt_cublas_status != CUBLAS_STATUS_SUCCESS)                                     \
      ::zt::cuda::fail_cublas_call(#call, zt_cublas_status, __FILE__, __LINE__);       \
  } while (0)

// After a kernel launch: a bad launch configuration (too much shared memory, grid too large)
// is reported here, naming the kernel; faults inside the kernel surface at the next
// synchronising call, which is checked too (at once, naming the kernel, with ZT_CUDA_SYNC=1).
#define ZT_CUDA_CHECK_LAUNCH(kernel_name)                                              \
  do {                                                                                 \
    const cudaError_t zt_cuda_status = cudaGetLastError();                             \
    if (zt_cuda_status != cudaSuccess)                                                 \
      ::zt::cuda::fail_cuda_call("launch of " kernel_name, zt_cuda_status, __FILE__,   \
                                 __LINE__);                                            \
    if (::zt::cuda::sync_after_each_launch())                                          \
      ::zt::cuda::check_kernel_completed(kernel_name, __FILE__, __LINE__);             \
  } while (0)
