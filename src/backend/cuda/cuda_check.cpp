// The error messages of failed CUDA runtime and cuBLASLt calls (see cuda_check.h).
#include "backend/cuda/cuda_check.h"

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

void fail_cublas_call(const char* call, cublasStatus_t status, const char* file, int line) {
  fail("cublas: ", call, " failed at ", short_path(file), ":", line, " on rank ", process_rank(),
       ": ", cublasLtGetStatusString(status), " (", cublasLtGetStatusName(status), ")");
}

}  // namespace zt::cuda
