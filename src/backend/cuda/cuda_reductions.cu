// The CUDA backend's reductions: sum of squares (gradient norms, in double, deterministic),
// the inf/NaN check (fp16 overflow), each over one tensor or several with one download, and
// the bias gradient (deterministic column sums).
#include <algorithm>
#include <span>
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
  ZT_SHARED(double, scratch, [32]);
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

// Blocks of sum_squares_kernel for n > 0 elements: a function of n alone, so the partial sums
// (and their total) are the same on every run.
unsigned int sum_squares_blocks(int64_t n) {
  return static_cast<unsigned int>(std::min<int64_t>(grid_for(vectors_of(n)), kMaxReductionBlocks));
}

// Throws unless every tensor of xs is device memory of a float dtype, naming it xs[i].
void expect_device_floats(const char* op, std::span<const Tensor> xs) {
  for (size_t i = 0; i < xs.size(); ++i) expect_device_float(op, cat("xs[", i, "]").c_str(), xs[i]);
}

// The sum of squares of every element of xs (checked device floats) with one download for all:
// each tensor's kernel writes its per-block partial sums into its own segment of one scratch
// buffer; the host adds each segment in block order, then the tensors' sums in span order
// starting from 0.0. So the result is ((0.0 + s[0]) + s[1]) + ..., s[i] = sum_squares(xs[i]),
// bit for bit: what the default Backend::sum_squares_of computes from sum_squares().
double sum_squares_in_order(CudaBackendImpl& backend, std::span<const Tensor> xs) {
  std::vector<unsigned int> blocks(xs.size());  // blocks[i]: partial sums of xs[i] (0: empty)
  size_t total_blocks = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    blocks[i] = xs[i].numel() > 0 ? sum_squares_blocks(xs[i].numel()) : 0u;
    total_blocks += blocks[i];
  }
  if (total_blocks == 0) return 0.0;  // no elements: nothing queued, nothing to wait for
  Buffer partial = backend.scratch(total_blocks * sizeof(double));  // [total_blocks]: xs[0]'s, xs[1]'s, ...
  double* segment = static_cast<double*>(partial.data());
  for (size_t i = 0; i < xs.size(); ++i) {
    if (blocks[i] == 0) continue;
    dispatch_float(xs[i].dtype, "sum_squares", "x", [&](auto format) {
      using Format = decltype(format);
      launch({blocks[i], kThreads, 0, backend.stream()}, sum_squares_kernel<Format>,
          segment, data_of<Format>(xs[i]), xs[i].numel());
      ZT_CUDA_CHECK_LAUNCH("sum_squares_kernel");
    });
    segment += blocks[i];
  }
  std::vector<double> host_partial(total_blocks);
  backend.download(host_partial.data(), partial.data(), total_blocks * sizeof(double));
  double total = 0.0;
  size_t next = 0;
  for (unsigned int count : blocks) {
    double tensor_sum = 0.0;
    for (unsigned int block = 0; block < count; ++block) tensor_sum += host_partial[next++];
    total += tensor_sum;
  }
  return total;
}

// True when any element of xs (checked device floats) is NaN or +-inf: every tensor's kernel
// raises the same flag word, one download for all.
bool any_inf_or_nan(CudaBackendImpl& backend, std::span<const Tensor> xs) {
  const bool any_elements =
      std::any_of(xs.begin(), xs.end(), [](const Tensor& x) { return x.numel() > 0; });
  if (!any_elements) return false;  // nothing queued, nothing to wait for
  Buffer found = backend.scratch(sizeof(unsigned int));  // [1] 0: none found yet
  ZT_CUDA_CHECK(cudaMemsetAsync(found.data(), 0, sizeof(unsigned int), backend.stream()));
  for (const Tensor& x : xs) {
    const int64_t n = x.numel();
    if (n == 0) continue;
    dispatch_float(x.dtype, "has_inf_or_nan", "x", [&](auto format) {
      using Format = decltype(format);
      launch({grid_for(vectors_of(n)), kThreads, 0, backend.stream()}, inf_or_nan_kernel<Format>,
          static_cast<unsigned int*>(found.data()), data_of<Format>(x), n);
      ZT_CUDA_CHECK_LAUNCH("inf_or_nan_kernel");
    });
  }
  unsigned int host_found = 0;
  backend.download(&host_found, found.data(), sizeof(unsigned int));
  return host_found != 0;
}

}  // namespace

double CudaBackendImpl::sum_squares(Tensor x) {
  expect_device_float("sum_squares", "x", x);
  return sum_squares_in_order(*this, std::span<const Tensor>(&x, 1));
}

double CudaBackendImpl::sum_squares_of(std::span<const Tensor> xs) {
  expect_device_floats("sum_squares_of", xs);
  return sum_squares_in_order(*this, xs);
}

bool CudaBackendImpl::has_inf_or_nan(Tensor x) {
  expect_device_float("has_inf_or_nan", "x", x);
  return any_inf_or_nan(*this, std::span<const Tensor>(&x, 1));
}

bool CudaBackendImpl::has_inf_or_nan_in(std::span<const Tensor> xs) {
  expect_device_floats("has_inf_or_nan_in", xs);
  return any_inf_or_nan(*this, xs);
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
