// The CPU backend's normalisations: RMSNorm (LLaMA) and LayerNorm (OPT), forward and backward.
// One row (token) per loop iteration, rows in parallel; row reductions in double. fp32 kernels;
// 16-bit activations, weights and parameter gradients go through Fp32Staging.
#include <cmath>

#include "backend/cpu/cpu_backend.h"

namespace zt::cpu {

namespace {
constexpr int64_t kParallelThreshold = 32768;  // elements; below this one thread is faster

// The fp32 views every norm works on: x[N,C], y (or dy) like x, dx like x (backward), weight[C].
struct NormArgs {
  Matrix x;
  int64_t rows = 0;
  int64_t cols = 0;
  Tensor like_x;  // y (forward) or dy (backward)
  Tensor weight;
};

// Checks the dtypes and shapes of x, like_x (y or dy) and weight, and stages x, weight and (as
// `like_x_is_output` says) like_x: read for dy, written for y.
NormArgs stage_norm_args(Fp32Staging& stage, const char* op, const Tensor& x, const char* like_x_arg,
                         const Tensor& like_x, bool like_x_is_output, const Tensor& weight) {
  expect_same_dtype(op, like_x_arg, like_x, "x", x);
  NormArgs args;
  args.x = f32_matrix(op, "x", stage.read("x", x));
  args.rows = args.x.rows;
  args.cols = args.x.cols;
  args.like_x = like_x_is_output ? stage.write(like_x_arg, like_x) : stage.read(like_x_arg, like_x);
  expect_same_shape(op, like_x_arg, like_x, "x", x);
  args.weight = stage.read("weight", weight);
  expect_shape(op, "weight", weight, {args.cols});
  return args;
}

// Throws unless the per-row statistic `arg` is fp32 with one value per row of x.
float* row_stat_arg(const char* op, const char* arg, const Tensor& stat, int64_t rows) {
  float* data = f32_arg(op, arg, stat);
  expect_numel(op, arg, stat, rows, "one value per row of x");
  return data;
}

// A parameter gradient (+=, any float dtype): empty means frozen (nullptr), otherwise its fp32
// view [C].
float* param_grad_arg(Fp32Staging& stage, const char* op, const char* arg, const Tensor& grad, int64_t cols) {
  if (grad.empty()) return nullptr;
  float* data = stage.update(arg, grad).f32();
  expect_shape(op, arg, grad, {cols});
  return data;
}

// dx of a norm's backward: the dtype and shape of x, written (Write) or read and written (Add:
// then not the memory of dy); its fp32 view.
float* input_grad_arg(Fp32Staging& stage, const char* op, const Tensor& dx, GradStore store,
                      const Tensor& dy, const Tensor& x) {
  expect_same_dtype(op, "dx", dx, "x", x);
  ZT_CHECK(store == GradStore::Write || dx.empty() || dx.data != dy.data, op,
           ": dx += needs dx and dy in different memory (dx aliases dy)");
  float* data = (store == GradStore::Add ? stage.update("dx", dx) : stage.write("dx", dx)).f32();
  expect_same_shape(op, "dx", dx, "x", x);
  return data;
}
}  // namespace

void CpuBackend::rmsnorm_forward(Tensor y, Tensor rstd, Tensor x, Tensor weight, float eps) {
  const char* op = "rmsnorm_forward";
  Fp32Staging stage(op);
  const NormArgs args = stage_norm_args(stage, op, x, "y", y, true, weight);
  float* rstd_data = row_stat_arg(op, "rstd", rstd, args.rows);
  float* y_data = args.like_x.f32();
  const float* x_data = args.x.data;
  const float* w = args.weight.f32();
  const int64_t cols = args.cols;
#pragma omp parallel for schedule(static) if (args.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < args.rows; ++row) {
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
  stage.write_back();
}

void CpuBackend::rmsnorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dy, Tensor x,
                                  Tensor weight, Tensor rstd) {
  const char* op = "rmsnorm_backward";
  Fp32Staging stage(op);
  const NormArgs args = stage_norm_args(stage, op, x, "dy", dy, false, weight);
  float* dx_data = input_grad_arg(stage, op, dx, dx_store, dy, x);
  const bool add = dx_store == GradStore::Add;
  const float* rstd_data = row_stat_arg(op, "rstd", rstd, args.rows);
  float* dweight_data = param_grad_arg(stage, op, "dweight", dweight, args.cols);
  const float* x_data = args.x.data;
  const float* dy_data = args.like_x.f32();
  const float* w = args.weight.f32();
  const int64_t cols = args.cols;
  // dweight first, so that dx may alias dy (Write): dweight[c] += sum_n dy * x * rstd.
  if (dweight_data) {
    accumulate_column_sums(dweight_data, args.rows, cols, [=](int64_t n, int64_t c) {
      return dy_data[n * cols + c] * (x_data[n * cols + c] * rstd_data[n]);
    });
  }
  // y = w x r with r = (mean(x^2) + eps)^-1/2 and dr/dx_j = -r^3 x_j / C, so
  // dx_j = r (w_j dy_j - x_j r^2 mean_i(w_i dy_i x_i)).
#pragma omp parallel for schedule(static) if (args.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < args.rows; ++row) {
    const float* x_row = x_data + row * cols;    // x_row[C]
    const float* dy_row = dy_data + row * cols;  // dy_row[C]
    float* dx_row = dx_data + row * cols;        // dx_row[C]
    const float r = rstd_data[row];
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(w[c] * dy_row[c]) * x_row[c];
    const float coefficient = static_cast<float>(dot / static_cast<double>(cols)) * r * r;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      const float gradient = r * (w[c] * dy_row[c] - x_row[c] * coefficient);
      dx_row[c] = add ? dx_row[c] + gradient : gradient;
    }
  }
  stage.write_back();
}

void CpuBackend::layernorm_forward(Tensor y, Tensor mean, Tensor rstd, Tensor x, Tensor weight,
                                   Tensor bias, float eps) {
  const char* op = "layernorm_forward";
  Fp32Staging stage(op);
  const NormArgs args = stage_norm_args(stage, op, x, "y", y, true, weight);
  float* mean_data = row_stat_arg(op, "mean", mean, args.rows);
  float* rstd_data = row_stat_arg(op, "rstd", rstd, args.rows);
  const float* b = stage.read("bias", bias).f32();
  expect_shape(op, "bias", bias, {args.cols});
  float* y_data = args.like_x.f32();
  const float* x_data = args.x.data;
  const float* w = args.weight.f32();
  const int64_t cols = args.cols;
#pragma omp parallel for schedule(static) if (args.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < args.rows; ++row) {
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
  stage.write_back();
}

void CpuBackend::layernorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dbias, Tensor dy,
                                    Tensor x, Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  Fp32Staging stage(op);
  const NormArgs args = stage_norm_args(stage, op, x, "dy", dy, false, weight);
  float* dx_data = input_grad_arg(stage, op, dx, dx_store, dy, x);
  const bool add = dx_store == GradStore::Add;
  const float* mean_data = row_stat_arg(op, "mean", mean, args.rows);
  const float* rstd_data = row_stat_arg(op, "rstd", rstd, args.rows);
  float* dweight_data = param_grad_arg(stage, op, "dweight", dweight, args.cols);
  float* dbias_data = param_grad_arg(stage, op, "dbias", dbias, args.cols);
  const float* x_data = args.x.data;
  const float* dy_data = args.like_x.f32();
  const float* w = args.weight.f32();
  const int64_t cols = args.cols;
  // Parameter gradients first, so that dx may alias dy.
  if (dweight_data) {
    accumulate_column_sums(dweight_data, args.rows, cols, [=](int64_t n, int64_t c) {
      return dy_data[n * cols + c] * ((x_data[n * cols + c] - mean_data[n]) * rstd_data[n]);
    });
  }
  if (dbias_data) {
    accumulate_column_sums(dbias_data, args.rows, cols,
                           [=](int64_t n, int64_t c) { return dy_data[n * cols + c]; });
  }
  // With xhat = (x - mean) r and g = w dy: dx = r (g - mean(g) - xhat mean(g xhat)).
#pragma omp parallel for schedule(static) if (args.x.numel() > kParallelThreshold)
  for (int64_t row = 0; row < args.rows; ++row) {
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
      const float gradient = r * (w[c] * dy_row[c] - g_mean - xhat * g_xhat_mean);
      dx_row[c] = add ? dx_row[c] + gradient : gradient;
    }
  }
  stage.write_back();
}

}  // namespace zt::cpu
