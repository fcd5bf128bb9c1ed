// The CUDA backend's normalisations: RMSNorm (LLaMA) and LayerNorm (OPT), forward and backward.
// One block per row (token); row statistics in fp32 with deterministic block reductions;
// weight/bias gradients by deterministic column sums (cuda_column_sums.cuh), computed before
// dx so that dx may alias dy, as on the CPU backend.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_column_sums.cuh"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

template <class Format>
using Storage = typename Format::Storage;

// Calls body(first, values) for the 8-element vectors of row[cols] this thread owns.
template <class Format, class Body>
__device__ inline void for_each_row_vector(const Storage<Format>* row, int64_t cols, Body body) {
  for (int64_t first = threadIdx.x * int64_t{kVector}; first < cols;
       first += int64_t{blockDim.x} * kVector) {
    float values[kVector];
    load8<Format>(row, first, cols, values);
    body(first, values);
  }
}

// y = (x * rstd) * weight, rstd = 1 / sqrt(mean(x^2) + eps) (as HF: variance in fp32).
template <class Format>
__global__ void rmsnorm_forward_kernel(Storage<Format>* y, float* rstd, const Storage<Format>* x,
                                       FloatArg weight, int64_t rows, int64_t cols, float eps) {
  ZT_SHARED(float, scratch, [32]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const Storage<Format>* x_row = x + row * cols;  // x_row[C]
    Storage<Format>* y_row = y + row * cols;        // y_row[C]
    float sum = 0.0f;
    for_each_row_vector<Format>(x_row, cols, [&](int64_t, const float(&v)[kVector]) {
#pragma unroll
      for (int k = 0; k < kVector; ++k) sum += v[k] * v[k];
    });
    sum = block_sum(sum, scratch);
    const float r = 1.0f / sqrtf(sum / static_cast<float>(cols) + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&v)[kVector]) {
      float out[kVector];
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        out[k] = first + k < cols ? __fmul_rn(__fmul_rn(v[k], r), weight.load(first + k)) : 0.0f;
      }
      store8<Format>(y_row, first, cols, out);
    });
  }
}

// dx[c] (+)= value[c], k < 8 of the vector at `first`: with `add` the sum in fp32, rounded once.
template <class Format>
__device__ inline void store_input_grad(Storage<Format>* dx_row, int64_t first, int64_t cols, bool add,
                                        float (&values)[kVector]) {
  if (add) {
    float old[kVector];
    load8<Format>(dx_row, first, cols, old);
#pragma unroll
    for (int k = 0; k < kVector; ++k) values[k] += old[k];
  }
  store8<Format>(dx_row, first, cols, values);
}

// dx (+)= r (w dy - x r^2 mean(w dy x)).
template <class Format>
__global__ void rmsnorm_backward_kernel(Storage<Format>* dx, const Storage<Format>* dy,
                                        const Storage<Format>* x, FloatArg weight,
                                        const float* rstd, int64_t rows, int64_t cols, bool add) {
  ZT_SHARED(float, scratch, [32]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const Storage<Format>* x_row = x + row * cols;    // x_row[C]
    const Storage<Format>* dy_row = dy + row * cols;  // dy_row[C]
    Storage<Format>* dx_row = dx + row * cols;        // dx_row[C]
    const float r = rstd[row];
    float dot = 0.0f;
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&xv)[kVector]) {
      float gv[kVector];
      load8<Format>(dy_row, first, cols, gv);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        if (first + k < cols) dot += weight.load(first + k) * gv[k] * xv[k];
      }
    });
    dot = block_sum(dot, scratch);
    const float coefficient = dot / static_cast<float>(cols) * r * r;
    // Each thread reads dy[c] before writing dx[c] for its own c, so dx may alias dy (Write).
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&xv)[kVector]) {
      float gv[kVector];
      load8<Format>(dy_row, first, cols, gv);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        gv[k] = first + k < cols ? r * (weight.load(first + k) * gv[k] - xv[k] * coefficient) : 0.0f;
      }
      store_input_grad<Format>(dx_row, first, cols, add, gv);
    });
  }
}

// y = (x - mean) * rstd * weight + bias, two passes (mean, then squared deviations).
template <class Format>
__global__ void layernorm_forward_kernel(Storage<Format>* y, float* mean, float* rstd,
                                         const Storage<Format>* x, FloatArg weight, FloatArg bias,
                                         int64_t rows, int64_t cols, float eps) {
  ZT_SHARED(float, scratch, [32]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const Storage<Format>* x_row = x + row * cols;  // x_row[C]
    Storage<Format>* y_row = y + row * cols;        // y_row[C]
    float sum = 0.0f;
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&v)[kVector]) {
#pragma unroll
      for (int k = 0; k < kVector; ++k) sum += first + k < cols ? v[k] : 0.0f;
    });
    const float m = block_sum(sum, scratch) / static_cast<float>(cols);
    float squares = 0.0f;
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&v)[kVector]) {
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        const float deviation = first + k < cols ? v[k] - m : 0.0f;
        squares += deviation * deviation;
      }
    });
    const float r = 1.0f / sqrtf(block_sum(squares, scratch) / static_cast<float>(cols) + eps);
    if (threadIdx.x == 0) {
      mean[row] = m;
      rstd[row] = r;
    }
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&v)[kVector]) {
      float out[kVector];
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        out[k] = first + k < cols
                     ? (v[k] - m) * r * weight.load(first + k) + bias.load(first + k)
                     : 0.0f;
      }
      store8<Format>(y_row, first, cols, out);
    });
  }
}

// With xhat = (x - mean) r and g = w dy: dx (+)= r (g - mean(g) - xhat mean(g xhat)).
template <class Format>
__global__ void layernorm_backward_kernel(Storage<Format>* dx, const Storage<Format>* dy,
                                          const Storage<Format>* x, FloatArg weight,
                                          const float* mean, const float* rstd, int64_t rows,
                                          int64_t cols, bool add) {
  ZT_SHARED(float, scratch, [32]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const Storage<Format>* x_row = x + row * cols;    // x_row[C]
    const Storage<Format>* dy_row = dy + row * cols;  // dy_row[C]
    Storage<Format>* dx_row = dx + row * cols;        // dx_row[C]
    const float m = mean[row], r = rstd[row];
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&xv)[kVector]) {
      float gv[kVector];
      load8<Format>(dy_row, first, cols, gv);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        if (first + k < cols) {
          const float g = weight.load(first + k) * gv[k];
          g_sum += g;
          g_xhat_sum += g * ((xv[k] - m) * r);
        }
      }
    });
    const float g_mean = block_sum(g_sum, scratch) / static_cast<float>(cols);
    const float g_xhat_mean = block_sum(g_xhat_sum, scratch) / static_cast<float>(cols);
    for_each_row_vector<Format>(x_row, cols, [&](int64_t first, const float(&xv)[kVector]) {
      float gv[kVector];
      load8<Format>(dy_row, first, cols, gv);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        const float xhat = (xv[k] - m) * r;
        gv[k] = first + k < cols ? r * (weight.load(first + k) * gv[k] - g_mean - xhat * g_xhat_mean)
                                 : 0.0f;
      }
      store_input_grad<Format>(dx_row, first, cols, add, gv);
    });
  }
}

// Column-sum terms of the parameter gradients.
template <class Format>
struct RmsWeightTerm {  // dy * (x * rstd)
  const Storage<Format>* dy;
  const Storage<Format>* x;
  const float* rstd;
  int64_t cols;
  __device__ float operator()(int64_t n, int64_t c) const {
    return Format::to_float(dy[n * cols + c]) * (Format::to_float(x[n * cols + c]) * rstd[n]);
  }
};

template <class Format>
struct LayerWeightTerm {  // dy * ((x - mean) * rstd)
  const Storage<Format>* dy;
  const Storage<Format>* x;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ float operator()(int64_t n, int64_t c) const {
    return Format::to_float(dy[n * cols + c]) *
           ((Format::to_float(x[n * cols + c]) - mean[n]) * rstd[n]);
  }
};


// The shapes every norm shares: x[N,C], like_x (y or dy) like x, weight[C], stats fp32[N].
MatrixShape check_norm(const char* op, const Tensor& x, const char* like_x_arg,
                       const Tensor& like_x, const Tensor& weight) {
  expect_device_float(op, "x", x);
  expect_device(op, like_x_arg, like_x);
  expect_same_shape(op, like_x_arg, like_x, "x", x);
  expect_same_dtype(op, like_x_arg, like_x, "x", x);
  const MatrixShape shape = matrix_shape(op, "x", x);
  expect_device_float(op, "weight", weight);
  expect_shape(op, "weight", weight, {shape.cols});
  return shape;
}

void check_row_stat(const char* op, const char* arg, const Tensor& stat, int64_t rows) {
  expect_device(op, arg, stat, DType::F32);
  expect_numel(op, arg, stat, rows, "one value per row of x");
}

// dx of a norm's backward: x's dtype and shape; with dx += not dy's memory (each thread reads
// dy[c] before it writes dx[c], which makes dx = in place on dy safe, but not dx +=).
void check_input_grad(const char* op, const Tensor& dx, GradStore store, const Tensor& dy, const Tensor& x) {
  expect_device(op, "dx", dx);
  expect_same_shape(op, "dx", dx, "x", x);
  expect_same_dtype(op, "dx", dx, "x", x);
  ZT_CHECK(store == GradStore::Write || dx.data != dy.data, op,
           ": dx += needs dx and dy in different memory (dx aliases dy)");
}

// Empty: frozen. Otherwise any float dtype with C elements.
void check_param_grad(const char* op, const char* arg, const Tensor& grad, int64_t cols) {
  if (grad.empty()) return;
  expect_device_float(op, arg, grad);
  expect_shape(op, arg, grad, {cols});
}

}  // namespace

void CudaBackendImpl::rmsnorm_forward(Tensor y, Tensor rstd, Tensor x, Tensor weight, float eps) {
  const char* op = "rmsnorm_forward";
  const MatrixShape shape = check_norm(op, x, "y", y, weight);
  check_row_stat(op, "rstd", rstd, shape.rows);
  if (shape.rows == 0 || shape.cols == 0) return;
  dispatch_float(x.dtype, op, "x", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(shape.rows), row_threads(shape.cols), 0, stream_}, rmsnorm_forward_kernel<Format>,
        data_of<Format>(y), rstd.f32(), data_of<Format>(x), float_arg(weight), shape.rows,
        shape.cols, eps);
    ZT_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
  });
}

void CudaBackendImpl::rmsnorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dy,
                                       Tensor x, Tensor weight, Tensor rstd) {
  const char* op = "rmsnorm_backward";
  const MatrixShape shape = check_norm(op, x, "dy", dy, weight);
  check_input_grad(op, dx, dx_store, dy, x);
  check_row_stat(op, "rstd", rstd, shape.rows);
  check_param_grad(op, "dweight", dweight, shape.cols);
  if (shape.rows == 0 || shape.cols == 0) return;
  dispatch_float(x.dtype, op, "x", [&](auto format) {
    using Format = decltype(format);
    if (!dweight.empty()) {
      accumulate_column_sums(*this, float_arg(dweight), shape.rows, shape.cols,
                             RmsWeightTerm<Format>{data_of<Format>(dy), data_of<Format>(x),
                                                   rstd.f32(), shape.cols});
    }
    launch({row_grid(shape.rows), row_threads(shape.cols), 0, stream_}, rmsnorm_backward_kernel<Format>,
        data_of<Format>(dx), data_of<Format>(dy), data_of<Format>(x), float_arg(weight),
        rstd.f32(), shape.rows, shape.cols, dx_store == GradStore::Add);
    ZT_CUDA_CHECK_LAUNCH("rmsnorm_backward_kernel");
  });
}

void CudaBackendImpl::layernorm_forward(Tensor y, Tensor mean, Tensor rstd, Tensor x,
                                        Tensor weight, Tensor bias, float eps) {
  const char* op = "layernorm_forward";
  const MatrixShape shape = check_norm(op, x, "y", y, weight);
  check_row_stat(op, "mean", mean, shape.rows);
  check_row_stat(op, "rstd", rstd, shape.rows);
  expect_device_float(op, "bias", bias);
  expect_shape(op, "bias", bias, {shape.cols});
  if (shape.rows == 0 || shape.cols == 0) return;
  dispatch_float(x.dtype, op, "x", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(shape.rows), row_threads(shape.cols), 0, stream_}, layernorm_forward_kernel<Format>,
        data_of<Format>(y), mean.f32(), rstd.f32(), data_of<Format>(x), float_arg(weight),
        float_arg(bias), shape.rows, shape.cols, eps);
    ZT_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
  });
}

void CudaBackendImpl::layernorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dbias,
                                         Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  const MatrixShape shape = check_norm(op, x, "dy", dy, weight);
  check_input_grad(op, dx, dx_store, dy, x);
  check_row_stat(op, "mean", mean, shape.rows);
  check_row_stat(op, "rstd", rstd, shape.rows);
  check_param_grad(op, "dweight", dweight, shape.cols);
  check_param_grad(op, "dbias", dbias, shape.cols);
  if (shape.rows == 0 || shape.cols == 0) return;
  dispatch_float(x.dtype, op, "x", [&](auto format) {
    using Format = decltype(format);
    if (!dweight.empty()) {
      accumulate_column_sums(*this, float_arg(dweight), shape.rows, shape.cols,
                             LayerWeightTerm<Format>{data_of<Format>(dy), data_of<Format>(x),
                                                     mean.f32(), rstd.f32(), shape.cols});
    }
    if (!dbias.empty()) {
      accumulate_column_sums(*this, float_arg(dbias), shape.rows, shape.cols,
                             ValueTerm<Format>{data_of<Format>(dy), shape.cols});
    }
    launch({row_grid(shape.rows), row_threads(shape.cols), 0, stream_}, layernorm_backward_kernel<Format>,
        data_of<Format>(dx), data_of<Format>(dy), data_of<Format>(x), float_arg(weight),
        mean.f32(), rstd.f32(), shape.rows, shape.cols, dx_store == GradStore::Add);
    ZT_CUDA_CHECK_LAUNCH("layernorm_backward_kernel");
  });
}

}  // namespace zt::cuda
