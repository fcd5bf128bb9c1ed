// The error messages of failed CUDA runtime and cuBLASLt calls (see cuda_check.h).
#include "backend/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace zt::cuda {

namespace {
// "src/backend/cuda/x.cu" rather than the absolute path of the build machine.
const char* short_path(const char* file) {
  const char* from_src = std::strstr(file, "src/");
  return from_src ? from_src : file;
}
}  // namespace

void fail_cuda_call(const char* call, cudaError_t status, const char* file, int line) {
  // The runtime also keeps the error as its "last error": clear it (when it is not sticky), or
  // a caller that catches this one would see it again at the next ZT_CUDA_CHECK_LAUNCH.
  cudaGetLastError();
  fail("cuda: ", call, " failed at ", short_path(file), ":", line, " on rank ", process_rank(),
       ": ", cudaGetErrorString(status), " (", cudaGetErrorName(status), ")");
}

bool sync_after_each_launch() {
  const char* value = std::getenv("ZT_CUDA_SYNC");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

void check_kernel_completed(const char* kernel_name, const char* file, int line) {
  const cudaError_t status = cudaDeviceSynchronize();
  if (status == cudaSuccess) return;
  cudaGetLastError();
  fail("cuda: kernel ", kernel_name, " launched at ", short_path(file), ":", line, " on rank ", process_rank(),
       " faulted: ", cudaGetErrorString(status), " (", cudaGetErrorName(status), "; found by ZT_CUDA_SYNC=1)");
}

void fail_cublas_call(const char* call, cublasStatus_t status, const char* file, int line) {
  fail("cublas: ", call, " failed at ", short_path(file), ":", line, " on rank ", process_rank(),
       ": ", cublasLtGetStatusString(status), " (", cublasLtGetStatusName(status), ")");
}

}  // namespace zt::cuda
