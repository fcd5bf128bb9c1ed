// The CUDA backend's reductions: sum of squares (gradient norms, in double, deterministic),
// the inf/NaN check (fp16 overflow), and the bias gradient (deterministic column sums).
#include <vector>

#include "backend/buffer.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_column_sums.cuh"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

// partial[block] = sum of x^2 over the vectors of x this block's grid-stride loop visits, in
// double. The grid size depends on n only, so the partials (and their sum) are reproducible.
template <class Format>
__global__ void sum_squares_kernel(double* partial, const typename Format::Storage* x, int64_t n) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(x, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) sum += static_cast<double>(values[k]) * values[k];
  });
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// *found = 1 when any element is NaN or +-inf (every writer writes the same value).
template <class Format>
__global__ void inf_or_nan_kernel(unsigned int* found, const typename Format::Storage* x, int64_t n) {
  bool any = false;
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
    load8<Format>(x, first, n, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) any |= !(fabsf(values[k]) <= 3.402823466e38f);  // NaN: true
  });
  if (any) *found = 1u;
}

constexpr int64_t kMaxReductionBlocks = 1024;

}  // namespace

double CudaBackendImpl::sum_squares(Tensor x) {
  expect_device_float("sum_squares", "x", x);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const unsigned int blocks =
      static_cast<unsigned int>(std::min<int64_t>(grid_for(vectors_of(n)), kMaxReductionBlocks));
  Buffer partial(*this, blocks * sizeof(double));  // partial[blocks]
  dispatch_float(x.dtype, "sum_squares", "x", [&](auto format) {
    using Format = decltype(format);
    sum_squares_kernel<Format><<<blocks, kThreads, 0, stream_>>>(
        static_cast<double*>(partial.data()),
        static_cast<const typename Format::Storage*>(x.data), n);
    ZT_CUDA_CHECK_LAUNCH("sum_squares_kernel");
  });
  std::vector<double> host_partial(blocks);
  download(host_partial.data(), partial.data(), blocks * sizeof(double));
  double total = 0.0;
  for (double value : host_partial) total += value;  // in block order: reproducible
  return total;
}

bool CudaBackendImpl::has_inf_or_nan(Tensor x) {
  expect_device_float("has_inf_or_nan", "x", x);
  const int64_t n = x.numel();
  if (n == 0) return false;
  Buffer found(*this, sizeof(unsigned int));
  ZT_CUDA_CHECK(cudaMemsetAsync(found.data(), 0, sizeof(unsigned int), stream_));
  dispatch_float(x.dtype, "has_inf_or_nan", "x", [&](auto format) {
    using Format = decltype(format);
    inf_or_nan_kernel<Format><<<grid_for(vectors_of(n)), kThreads, 0, stream_>>>(
        static_cast<unsigned int*>(found.data()),
        static_cast<const typename Format::Storage*>(x.data), n);
    ZT_CUDA_CHECK_LAUNCH("inf_or_nan_kernel");
  });
  unsigned int host_found = 0;
  download(&host_found, found.data(), sizeof(unsigned int));
  return host_found != 0;
}

void CudaBackendImpl::bias_backward(Tensor dbias, Tensor dy) {
  if (dbias.empty()) return;  // frozen bias
  expect_device_float("bias_backward", "dy", dy);
  expect_device_float("bias_backward", "dbias", dbias);
  const MatrixShape shape = matrix_shape("bias_backward", "dy", dy);
  expect_shape("bias_backward", "dbias", dbias, {shape.cols});
  dispatch_float(dy.dtype, "bias_backward", "dy", [&](auto format) {
    using Format = decltype(format);
    accumulate_column_sums(*this, float_arg(dbias), shape.rows, shape.cols,
                           ValueTerm<Format>{data_of<Format>(dy), shape.cols});
  });
}

}  // namespace zt::cuda
