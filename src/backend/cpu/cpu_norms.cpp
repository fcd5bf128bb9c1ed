// The CPU backend's normalisations: RMSNorm (LLaMA) and LayerNorm (OPT), forward and backward.
// One row (token) per loop iteration, rows in parallel; row reductions in double.
#include <cmath>

#include "backend/cpu/cpu_backend.h"

namespace zt::cpu {

namespace {
constexpr int64_t kParallelThreshold = 32768;  // elements; below this one thread is faster

// The shapes every norm shares: x[N,C], y (or dy) like x, weight[C], per-row stats[N].
struct NormShapes {
  Matrix x;
  int64_t rows = 0;
  int64_t cols = 0;
};

NormShapes check_norm_shapes(const char* op, const Tensor& x, const char* like_x_arg,
                             const Tensor& like_x, const Tensor& weight) {
  NormShapes shapes;
  shapes.x = f32_matrix(op, "x", x);
  shapes.rows = shapes.x.rows;
  shapes.cols = shapes.x.cols;
  f32_arg(op, like_x_arg, like_x);
  expect_same_shape(op, like_x_arg, like_x, "x", x);
  f32_arg(op, "weight", weight);
  expect_shape(op, "weight", weight, {shapes.cols});
  return shapes;
}

// Throws unless the per-row statistic `arg` is fp32 with one value per row of x.
float* row_stat_arg(const char* op, const char* arg, const Tensor& stat, int64_t rows) {
  float* data = f32_arg(op, arg, stat);
  expect_numel(op, arg, stat, rows, "one value per row of x");
  return data;
}

// A parameter gradient: empty means frozen (nullptr), otherwise fp32[C].
float* param_grad_arg(const char* op, const char* arg, const Tensor& grad, int64_t cols) {
  if (grad.empty()) return nullptr;
  float* data = f32_arg(op, arg, grad);
  expect_shape(op, arg, grad, {cols});
  return data;
}
}  // namespace

void CpuBackend::rmsnorm_forward(Tensor y, Tensor rstd, Tensor x, Tensor weight, float eps) {
  const char* op = "rmsnorm_forward";
  const NormShapes shapes = check_norm_shapes(op, x, "y", y, weight);
  float* rstd_data = row_stat_arg(op, "rstd", rstd, shapes.rows);
  float* y_data = y.f32();
  const float* x_data = shapes.x.data;
  const float* w = weight.f32();
  const int64_t cols = shapes.cols;
#pragma omp parallel for schedule(static) if (shapes.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < shapes.rows; ++row) {
    const float* x_row = x_data + row * cols;  // x_row[C]
    float* y_row = y_data + row * cols;        // y_row[C]
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(x_row[c]) * x_row[c];
    // As HF: variance in fp32, then rsqrt(variance + eps), then (x * rstd) * weight.
    const float variance = static_cast<float>(sum / static_cast<double>(cols));
    const float r = 1.0f / std::sqrt(variance + eps);
    rstd_data[row] = r;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y_row[c] = (x_row[c] * r) * w[c];
  }
}

void CpuBackend::rmsnorm_backward(Tensor dx, Tensor dweight, Tensor dy, Tensor x, Tensor weight,
                                  Tensor rstd) {
  const char* op = "rmsnorm_backward";
  const NormShapes shapes = check_norm_shapes(op, x, "dy", dy, weight);
  f32_arg(op, "dx", dx);
  expect_same_shape(op, "dx", dx, "x", x);
  const float* rstd_data = row_stat_arg(op, "rstd", rstd, shapes.rows);
  float* dweight_data = param_grad_arg(op, "dweight", dweight, shapes.cols);
  const float* x_data = shapes.x.data;
  const float* dy_data = dy.f32();
  float* dx_data = dx.f32();
  const float* w = weight.f32();
  const int64_t cols = shapes.cols;
  // dweight first, so that dx may alias dy: dweight[c] += sum_n dy * x * rstd.
  if (dweight_data) {
    accumulate_column_sums(dweight_data, shapes.rows, cols, [=](int64_t n, int64_t c) {
      return dy_data[n * cols + c] * (x_data[n * cols + c] * rstd_data[n]);
    });
  }
  // y = w x r with r = (mean(x^2) + eps)^-1/2 and dr/dx_j = -r^3 x_j / C, so
  // dx_j = r (w_j dy_j - x_j r^2 mean_i(w_i dy_i x_i)).
#pragma omp parallel for schedule(static) if (shapes.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < shapes.rows; ++row) {
    const float* x_row = x_data + row * cols;    // x_row[C]
    const float* dy_row = dy_data + row * cols;  // dy_row[C]
    float* dx_row = dx_data + row * cols;        // dx_row[C]
    const float r = rstd_data[row];
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(w[c] * dy_row[c]) * x_row[c];
    const float coefficient = static_cast<float>(dot / static_cast<double>(cols)) * r * r;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dx_row[c] = r * (w[c] * dy_row[c] - x_row[c] * coefficient);
  }
}

void CpuBackend::layernorm_forward(Tensor y, Tensor mean, Tensor rstd, Tensor x, Tensor weight,
                                   Tensor bias, float eps) {
  const char* op = "layernorm_forward";
  const NormShapes shapes = check_norm_shapes(op, x, "y", y, weight);
  float* mean_data = row_stat_arg(op, "mean", mean, shapes.rows);
  float* rstd_data = row_stat_arg(op, "rstd", rstd, shapes.rows);
  const float* b = f32_arg(op, "bias", bias);
  expect_shape(op, "bias", bias, {shapes.cols});
  float* y_data = y.f32();
  const float* x_data = shapes.x.data;
  const float* w = weight.f32();
  const int64_t cols = shapes.cols;
#pragma omp parallel for schedule(static) if (shapes.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < shapes.rows; ++row) {
    const float* x_row = x_data + row * cols;  // x_row[C]
    float* y_row = y_data + row * cols;        // y_row[C]
    // Two passes (mean, then squared deviations): no cancellation for rows with a large mean.
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += x_row[c];
    const double row_mean = sum / static_cast<double>(cols);
    double squares = 0.0;
#pragma omp simd reduction(+ : squares)
    for (int64_t c = 0; c < cols; ++c) {
      const double deviation = x_row[c] - row_mean;
      squares += deviation * deviation;
    }
    const float m = static_cast<float>(row_mean);
    const float r =
        static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(cols) + eps));
    mean_data[row] = m;
    rstd_data[row] = r;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y_row[c] = (x_row[c] - m) * r * w[c] + b[c];
  }
}

void CpuBackend::layernorm_backward(Tensor dx, Tensor dweight, Tensor dbias, Tensor dy, Tensor x,
                                    Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  const NormShapes shapes = check_norm_shapes(op, x, "dy", dy, weight);
  f32_arg(op, "dx", dx);
  expect_same_shape(op, "dx", dx, "x", x);
  const float* mean_data = row_stat_arg(op, "mean", mean, shapes.rows);
  const float* rstd_data = row_stat_arg(op, "rstd", rstd, shapes.rows);
  float* dweight_data = param_grad_arg(op, "dweight", dweight, shapes.cols);
  float* dbias_data = param_grad_arg(op, "dbias", dbias, shapes.cols);
  const float* x_data = shapes.x.data;
  const float* dy_data = dy.f32();
  float* dx_data = dx.f32();
  const float* w = weight.f32();
  const int64_t cols = shapes.cols;
  // Parameter gradients first, so that dx may alias dy.
  if (dweight_data) {
    accumulate_column_sums(dweight_data, shapes.rows, cols, [=](int64_t n, int64_t c) {
      return dy_data[n * cols + c] * ((x_data[n * cols + c] - mean_data[n]) * rstd_data[n]);
    });
  }
  if (dbias_data) {
    accumulate_column_sums(dbias_data, shapes.rows, cols,
                           [=](int64_t n, int64_t c) { return dy_data[n * cols + c]; });
  }
  // With xhat = (x - mean) r and g = w dy: dx = r (g - mean(g) - xhat mean(g xhat)).
#pragma omp parallel for schedule(static) if (shapes.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < shapes.rows; ++row) {
    const float* x_row = x_data + row * cols;    // x_row[C]
    const float* dy_row = dy_data + row * cols;  // dy_row[C]
    float* dx_row = dx_data + row * cols;        // dx_row[C]
    const float m = mean_data[row];
    const float r = rstd_data[row];
    double g_sum = 0.0;
    double g_xhat_sum = 0.0;
#pragma omp simd reduction(+ : g_sum, g_xhat_sum)
    for (int64_t c = 0; c < cols; ++c) {
      const float g = w[c] * dy_row[c];
      g_sum += g;
      g_xhat_sum += static_cast<double>(g) * ((x_row[c] - m) * r);
    }
    const float g_mean = static_cast<float>(g_sum / static_cast<double>(cols));
    const float g_xhat_mean = static_cast<float>(g_xhat_sum / static_cast<double>(cols));
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (x_row[c] - m) * r;
      dx_row[c] = r * (w[c] * dy_row[c] - g_mean - xhat * g_xhat_mean);
    }
  }
}

}  // namespace zt::cpu
