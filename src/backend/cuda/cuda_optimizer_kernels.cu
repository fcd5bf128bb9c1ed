// CudaOptimizerKernels (cuda_optimizer_kernels.h): AdamW, SGD, LAMB's, the sign compression's
// and AdaLomo's passes. AdamW: one fused pass over fp32 param, grad, exp_avg, exp_avg_sq, with
// the CPU backend's operation order (torch.optim.AdamW's single-tensor path) and its constants
// (backend/adamw_constants.h). Explicit round-to-nearest intrinsics keep the compiler from fusing
// multiply-adds, so each operation rounds as written, as the CPU kernel (compiled without
// contraction) does.
#include "backend/cuda/cuda_optimizer_kernels.h"

#include <algorithm>
#include <cmath>

#include "backend/adamw_constants.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_column_sums.cuh"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

// Loads the 8-element vector at `first` of an Adam-style step's fp32 arrays of n elements: the
// parameter, its gradient and the two moments (AdamW's and LAMB's passes).
__device__ inline void load_adam_vectors(const float* param, const float* grad, const float* exp_avg,
                                         const float* exp_avg_sq, int64_t first, int64_t n, float (&p)[kVector],
                                         float (&g)[kVector], float (&m)[kVector], float (&v)[kVector]) {
  load8<Fp32Format>(param, first, n, p);
  load8<Fp32Format>(grad, first, n, g);
  load8<Fp32Format>(exp_avg, first, n, m);
  load8<Fp32Format>(exp_avg_sq, first, n, v);
}

__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                             int64_t n, AdamWConstants s) {
  for_each_vector(n, [&](int64_t first) {
    float p[kVector], g[kVector], m[kVector], v[kVector];
    load_adam_vectors(param, grad, exp_avg, exp_avg_sq, first, n, p, g, m, v);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float decayed = __fmul_rn(p[k], s.decay_factor);  // param.mul_(1 - lr * wd)
      const float difference = __fsub_rn(g[k], m[k]);
      m[k] = s.lerp_from_start ? __fadd_rn(m[k], __fmul_rn(s.lerp_weight, difference))
                               : __fsub_rn(g[k], __fmul_rn(difference, s.lerp_complement));
      v[k] = __fadd_rn(__fmul_rn(v[k], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, g[k]), g[k]));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v[k]), s.bias_correction2_sqrt), s.eps);
      p[k] = __fadd_rn(decayed, __fdiv_rn(__fmul_rn(s.negative_step_size, m[k]), denom));
    }
    store8<Fp32Format>(param, first, n, p);
    store8<Fp32Format>(exp_avg, first, n, m);
    store8<Fp32Format>(exp_avg_sq, first, n, v);
  });
}

}  // namespace

void CudaOptimizerKernels::adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                                 const AdamWParams& params) {
  const char* op = "adamw";
  expect_device(op, "param", param, DType::F32);
  expect_device(op, "grad", grad, DType::F32);
  expect_device(op, "exp_avg", exp_avg, DType::F32);
  expect_device(op, "exp_avg_sq", exp_avg_sq, DType::F32);
  const int64_t n =
      expect_numel_of_param(op, param, {{"grad", grad}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}});
  ZT_CHECK(params.step >= 1, op, ": step = ", params.step, " (steps count from 1)");
  if (n == 0) return;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(vectors_of(n)), kThreads, 0, stream}, adamw_kernel,
      param.f32(), grad.f32(), exp_avg.f32(), exp_avg_sq.f32(), n, adamw_constants(params));
  ZT_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace zt::cuda

// ---- SGD and LAMB's per-element pass ------------------------------------------------------------

namespace zt::cuda {

namespace {

struct SgdScalars {
  float lr, weight_decay, momentum, one_minus_dampening;
  bool has_momentum, first_step, nesterov;
};

__global__ void sgd_kernel(float* param, const float* grad, float* buffer, int64_t n, SgdScalars s) {
  for_each_vector(n, [&](int64_t first) {
    float p[kVector], g[kVector], b[kVector] = {};  // b: read only with momentum after the first step
    load8<Fp32Format>(param, first, n, p);
    load8<Fp32Format>(grad, first, n, g);
    if (s.has_momentum && !s.first_step) load8<Fp32Format>(buffer, first, n, b);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      float d = s.weight_decay != 0.0f ? __fadd_rn(g[k], __fmul_rn(s.weight_decay, p[k])) : g[k];
      if (s.has_momentum) {
        b[k] = s.first_step ? d : __fadd_rn(__fmul_rn(b[k], s.momentum), __fmul_rn(s.one_minus_dampening, d));
        d = s.nesterov ? __fadd_rn(d, __fmul_rn(s.momentum, b[k])) : b[k];
      }
      p[k] = __fsub_rn(p[k], __fmul_rn(s.lr, d));
    }
    store8<Fp32Format>(param, first, n, p);
    if (s.has_momentum) store8<Fp32Format>(buffer, first, n, b);
  });
}

struct LambScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  bool eps_inside_sqrt;
};

__global__ void lamb_direction_kernel(float* update, const float* param, const float* grad, float* exp_avg,
                                      float* exp_avg_sq, int64_t n, LambScalars s) {
  for_each_vector(n, [&](int64_t first) {
    float p[kVector], g[kVector], m[kVector], v[kVector], u[kVector];
    load_adam_vectors(param, grad, exp_avg, exp_avg_sq, first, n, p, g, m, v);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      m[k] = __fadd_rn(__fmul_rn(s.beta1, m[k]), __fmul_rn(s.one_minus_beta1, g[k]));
      v[k] = __fadd_rn(__fmul_rn(s.beta2, v[k]), __fmul_rn(__fmul_rn(s.one_minus_beta2, g[k]), g[k]));
      const float denom = s.eps_inside_sqrt ? __fsqrt_rn(__fadd_rn(v[k], s.eps)) : __fadd_rn(__fsqrt_rn(v[k]), s.eps);
      u[k] = __fadd_rn(__fdiv_rn(m[k], denom), __fmul_rn(s.weight_decay, p[k]));
    }
    store8<Fp32Format>(exp_avg, first, n, m);
    store8<Fp32Format>(exp_avg_sq, first, n, v);
    store8<Fp32Format>(update, first, n, u);  // after every load: update may alias grad
  });
}

// 1-bit compression: one thread per packed byte (8 elements), so that no two threads write one
// byte; bit 7 - j of byte b is element 8 b + j (backend.h "pack_signs").
__global__ void pack_signs_kernel(uint8_t* bits, float* error, const float* x, int64_t n, float scale) {
  const int64_t bytes = (n + 7) / 8;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < bytes;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    unsigned int value = 0;
    for (int j = 0; j < 8 && 8 * b + j < n; ++j) {
      const int64_t i = 8 * b + j;
      const bool positive = x[i] >= 0.0f;
      value |= positive ? (0x80u >> j) : 0u;
      error[i] = __fsub_rn(x[i], positive ? scale : -scale);
    }
    bits[b] = static_cast<uint8_t>(value);
  }
}

__global__ void add_signs_kernel(float* out, const uint8_t* bits, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __fadd_rn(out[i], (bits[i / 8] & (0x80u >> (i % 8))) ? scale : -scale);
}

__global__ void adam_denominator_scale_kernel(float* x, const float* v, int64_t n, float eps, bool divide) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float denominator = __fadd_rn(__fsqrt_rn(v[i]), eps);
    x[i] = divide ? __fdiv_rn(x[i], denominator) : __fmul_rn(x[i], denominator);
  }
}

}  // namespace

void CudaOptimizerKernels::sgd(Tensor param, Tensor grad, Tensor momentum_buffer, const SgdParams& params) {
  const char* op = "sgd";
  expect_device(op, "param", param, DType::F32);
  expect_device(op, "grad", grad, DType::F32);
  const int64_t n = expect_numel_of_param(op, param, {{"grad", grad}});
  SgdScalars scalars;
  scalars.has_momentum = params.momentum != 0.0;
  if (scalars.has_momentum) {
    expect_device(op, "momentum_buffer", momentum_buffer, DType::F32);
    expect_numel(op, "momentum_buffer", momentum_buffer, n, "the elements of param");
  }
  if (n == 0) return;
  scalars.lr = static_cast<float>(params.lr);
  scalars.weight_decay = static_cast<float>(params.weight_decay);
  scalars.momentum = static_cast<float>(params.momentum);
  scalars.one_minus_dampening = static_cast<float>(1.0 - params.dampening);
  scalars.first_step = params.first_step;
  scalars.nesterov = params.nesterov;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(vectors_of(n)), kThreads, 0, stream}, sgd_kernel, param.f32(), grad.f32(),
         scalars.has_momentum ? momentum_buffer.f32() : nullptr, n, scalars);
  ZT_CUDA_CHECK_LAUNCH("sgd_kernel");
}

void CudaOptimizerKernels::lamb_direction(Tensor update, Tensor param, Tensor grad, Tensor exp_avg,
                                          Tensor exp_avg_sq, const LambParams& params) {
  const char* op = "lamb_direction";
  expect_device(op, "update", update, DType::F32);
  expect_device(op, "param", param, DType::F32);
  expect_device(op, "grad", grad, DType::F32);
  expect_device(op, "exp_avg", exp_avg, DType::F32);
  expect_device(op, "exp_avg_sq", exp_avg_sq, DType::F32);
  const int64_t n = expect_numel_of_param(
      op, param, {{"update", update}, {"grad", grad}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}});
  if (n == 0) return;
  LambScalars scalars;
  scalars.beta1 = static_cast<float>(params.beta1);
  scalars.one_minus_beta1 = static_cast<float>(1.0 - params.beta1);
  scalars.beta2 = static_cast<float>(params.beta2);
  scalars.one_minus_beta2 = static_cast<float>(1.0 - params.beta2);
  scalars.eps = static_cast<float>(params.eps);
  scalars.weight_decay = static_cast<float>(params.weight_decay);
  scalars.eps_inside_sqrt = params.eps_inside_sqrt;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(vectors_of(n)), kThreads, 0, stream}, lamb_direction_kernel, update.f32(), param.f32(), grad.f32(),
         exp_avg.f32(), exp_avg_sq.f32(), n, scalars);
  ZT_CUDA_CHECK_LAUNCH("lamb_direction_kernel");
}

}  // namespace zt::cuda

namespace zt::cuda {

void CudaOptimizerKernels::pack_signs(Tensor bits, Tensor error, Tensor x, float scale) {
  const char* op = "pack_signs";
  expect_device(op, "bits", bits, DType::U8);
  expect_device(op, "error", error, DType::F32);
  expect_device(op, "x", x, DType::F32);
  const int64_t n = x.numel();
  expect_numel(op, "error", error, n, "the elements of x");
  expect_numel(op, "bits", bits, (n + 7) / 8, "ceil(elements of x / 8)");
  if (n == 0) return;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for((n + 7) / 8), kThreads, 0, stream}, pack_signs_kernel, bits.u8(), error.f32(), x.f32(), n, scale);
  ZT_CUDA_CHECK_LAUNCH("pack_signs_kernel");
}

void CudaOptimizerKernels::add_signs(Tensor out, Tensor bits, float scale) {
  const char* op = "add_signs";
  expect_device(op, "out", out, DType::F32);
  expect_device(op, "bits", bits, DType::U8);
  const int64_t n = out.numel();
  expect_numel(op, "bits", bits, (n + 7) / 8, "ceil(elements of out / 8)");
  if (n == 0) return;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(n), kThreads, 0, stream}, add_signs_kernel, out.f32(), bits.u8(), n, scale);
  ZT_CUDA_CHECK_LAUNCH("add_signs_kernel");
}

void CudaOptimizerKernels::adam_denominator_scale(Tensor x, Tensor exp_avg_sq, float eps, bool divide) {
  const char* op = "adam_denominator_scale";
  expect_device(op, "x", x, DType::F32);
  expect_device(op, "exp_avg_sq", exp_avg_sq, DType::F32);
  const int64_t n = x.numel();
  expect_numel(op, "exp_avg_sq", exp_avg_sq, n, "the elements of x");
  if (n == 0) return;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(n), kThreads, 0, stream}, adam_denominator_scale_kernel, x.f32(), exp_avg_sq.f32(), n, eps, divide);
  ZT_CUDA_CHECK_LAUNCH("adam_denominator_scale_kernel");
}

}  // namespace zt::cuda

// ---- AdaLomo's factored second moment -----------------------------------------------------------
// The slice grad[n] is the tensor's elements [offset, offset + n): element i sits at row
// (offset + i) / cols, column (offset + i) % cols. Row sums: one block per row the slice touches
// (fp32 block reduction, as a norm's row statistics); column sums: the deterministic column sums
// of the touched rows, elements outside the slice counting 0.

namespace zt::cuda {

namespace {

__device__ inline float square_plus(float g, float eps) { return __fadd_rn(__fmul_rn(g, g), eps); }

// row_sums[first_row + j] = the sum of g^2 + eps over the slice's elements of that row, j < rows.
__global__ void adalomo_row_sums_kernel(float* row_sums, const float* grad, int64_t n, int64_t offset, int64_t cols,
                                        int64_t first_row, int64_t rows, float eps) {
  ZT_SHARED(float, scratch, [32]);
  for (int64_t j = blockIdx.x; j < rows; j += gridDim.x) {
    const int64_t row = first_row + j;
    const int64_t begin = row * cols - offset > 0 ? row * cols - offset : 0;     // in grad
    const int64_t end = (row + 1) * cols - offset < n ? (row + 1) * cols - offset : n;
    float sum = 0.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) sum += square_plus(grad[i], eps);
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) row_sums[row] = sum;
  }
}

// A vector ([d, 1]): each "row" is one element, sums[offset + i] = g[i]^2 + eps.
__global__ void adalomo_vector_squares_kernel(float* sums, const float* grad, int64_t n, int64_t offset, float eps) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    sums[offset + i] = square_plus(grad[i], eps);
}

// term(j, c) for the touched rows [first_row, first_row + rows) x [0, cols): g^2 + eps inside the slice, else 0.
struct SliceSquareTerm {
  const float* grad;
  int64_t n, offset, first_row, cols;
  float eps;
  __device__ float operator()(int64_t j, int64_t col) const {
    const int64_t i = (first_row + j) * cols + col - offset;
    return i >= 0 && i < n ? square_plus(grad[i], eps) : 0.0f;
  }
};

// row = keep row + take row_sums / cols, col = keep col + take col_sums / rows (col null: a vector).
__global__ void adalomo_moments_kernel(float* row, float* col, const float* row_sums, const float* col_sums,
                                       int64_t rows, int64_t cols, float keep, float take) {
  const int64_t count = col != nullptr && cols > rows ? cols : rows;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    if (i < rows)
      row[i] = __fadd_rn(__fmul_rn(row[i], keep), __fmul_rn(take, __fdiv_rn(row_sums[i], static_cast<float>(cols))));
    if (col != nullptr && i < cols)
      col[i] = __fadd_rn(__fmul_rn(col[i], keep), __fmul_rn(take, __fdiv_rn(col_sums[i], static_cast<float>(rows))));
  }
}

// total[0] = the sum of row[rows] in double, by one block in a fixed order.
__global__ void adalomo_row_total_kernel(double* total, const float* row, int64_t rows) {
  ZT_SHARED(double, scratch, [32]);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) sum += static_cast<double>(row[i]);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *total = sum;
}

__device__ inline float reciprocal_sqrt(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }

// update[i] = (rsqrt(row[r] / row_mean) rsqrt(col[c])) g[i]; a vector (col null): rsqrt(row[offset + i]) g[i].
__global__ void adalomo_direction_kernel(float* update, const float* grad, const float* row, const float* col,
                                         int64_t n, int64_t offset, int64_t cols, float row_mean) {
  for_each_vector(n, [&](int64_t first) {
    float g[kVector], u[kVector];
    load8<Fp32Format>(grad, first, n, g);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const int64_t at = offset + first + k;  // in the tensor; past the slice's end only when first + k >= n
      float factor = 0.0f;
      if (first + k < n && col != nullptr)
        factor = __fmul_rn(reciprocal_sqrt(__fdiv_rn(row[at / cols], row_mean)), reciprocal_sqrt(col[at % cols]));
      else if (first + k < n)
        factor = reciprocal_sqrt(row[at]);
      u[k] = __fmul_rn(factor, g[k]);
    }
    store8<Fp32Format>(update, first, n, u);  // after the loads: update may alias grad
  });
}

}  // namespace

void CudaOptimizerKernels::adalomo_square_sums(Tensor row_sums, Tensor col_sums, Tensor grad, int64_t offset,
                                               float eps) {
  const char* op = "adalomo_square_sums";
  expect_device(op, "row_sums", row_sums, DType::F32);
  if (!col_sums.empty()) expect_device(op, "col_sums", col_sums, DType::F32);
  expect_device(op, "grad", grad, DType::F32);
  const AdalomoShape shape = adalomo_shape(op, "row_sums", row_sums, "col_sums", col_sums, grad, offset);
  backend_.fill(row_sums, 0.0f);
  if (shape.factored) backend_.fill(col_sums, 0.0f);
  const int64_t n = grad.numel();
  if (n == 0) return;
  const cudaStream_t stream = backend_.stream();
  if (!shape.factored) {
    launch({grid_for(n), kThreads, 0, stream}, adalomo_vector_squares_kernel, row_sums.f32(), grad.f32(), n, offset, eps);
    ZT_CUDA_CHECK_LAUNCH("adalomo_vector_squares_kernel");
    return;
  }
  const int64_t cols = shape.cols, first_row = offset / cols, rows = (offset + n - 1) / cols - first_row + 1;
  launch({row_grid(rows), kThreads, 0, stream}, adalomo_row_sums_kernel, row_sums.f32(), grad.f32(), n, offset, cols,
         first_row, rows, eps);
  ZT_CUDA_CHECK_LAUNCH("adalomo_row_sums_kernel");
  accumulate_column_sums(backend_, float_arg(col_sums), rows, cols,
                         SliceSquareTerm{grad.f32(), n, offset, first_row, cols, eps});
}

double CudaOptimizerKernels::adalomo_moments(Tensor row, Tensor col, Tensor row_sums, Tensor col_sums,
                                             float beta2t) {
  const char* op = "adalomo_moments";
  expect_device(op, "row", row, DType::F32);
  expect_device(op, "row_sums", row_sums, DType::F32);
  expect_numel(op, "row_sums", row_sums, row.numel(), "the elements of row");
  ZT_CHECK(row.numel() > 0, op, ": row has no elements (the tensor has at least one row)");
  ZT_CHECK(col.empty() == col_sums.empty(), op, ": col and col_sums must both be given (a matrix) or both be empty "
           "(a vector)");
  const bool factored = !col.empty();
  if (factored) {
    expect_device(op, "col", col, DType::F32);
    expect_device(op, "col_sums", col_sums, DType::F32);
    expect_numel(op, "col_sums", col_sums, col.numel(), "the elements of col");
  }
  const int64_t rows = row.numel(), cols = factored ? col.numel() : 1;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(std::max(rows, cols)), kThreads, 0, stream}, adalomo_moments_kernel, row.f32(),
         factored ? col.f32() : nullptr, row_sums.f32(), factored ? col_sums.f32() : nullptr, rows, cols, beta2t,
         1.0f - beta2t);
  ZT_CUDA_CHECK_LAUNCH("adalomo_moments_kernel");
  Buffer total = backend_.scratch(sizeof(double));  // fp64 [1]
  launch({1, kThreads, 0, stream}, adalomo_row_total_kernel, static_cast<double*>(total.data()), row.f32(), rows);
  ZT_CUDA_CHECK_LAUNCH("adalomo_row_total_kernel");
  double host_total = 0.0;
  backend_.download(&host_total, total.data(), sizeof(double));
  return host_total / static_cast<double>(rows);
}

void CudaOptimizerKernels::adalomo_direction(Tensor update, Tensor grad, Tensor row, Tensor col, int64_t offset,
                                             float row_mean) {
  const char* op = "adalomo_direction";
  expect_device(op, "update", update, DType::F32);
  expect_device(op, "grad", grad, DType::F32);
  expect_device(op, "row", row, DType::F32);
  if (!col.empty()) expect_device(op, "col", col, DType::F32);
  expect_numel(op, "update", update, grad.numel(), "the elements of grad");
  const AdalomoShape shape = adalomo_shape(op, "row", row, "col", col, grad, offset);
  const int64_t n = grad.numel();
  if (n == 0) return;
  const cudaStream_t stream = backend_.stream();
  launch({grid_for(vectors_of(n)), kThreads, 0, stream}, adalomo_direction_kernel, update.f32(), grad.f32(), row.f32(),
         shape.factored ? col.f32() : nullptr, n, offset, shape.cols, row_mean);
  ZT_CUDA_CHECK_LAUNCH("adalomo_direction_kernel");
}

}  // namespace zt::cuda
