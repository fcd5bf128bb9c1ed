// The CPU backend's pointwise layers: rotary position embedding (HF rotate_half layout),
// SwiGLU, ReLU and inverted dropout with counter-based masks; fp32 kernels, 16-bit storage
// through Fp32Staging.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_vector_math.h"

namespace zt::cpu {

namespace {
constexpr int64_t kParallelThreshold = 32768;  // elements; below this one thread is faster

// Rotates x[B,T,H,D] in place by angle position * inv_freq[i] (direction +1: forward) or by its
// negative (direction -1: the transpose, for backward) on the pairs (x[i], x[i + D/2]); the
// position of token (b, t) is positions[b*T+t] (t when positions is empty).
void rotate_pairs(const char* op, const Tensor& x, const Tensor& inv_freq, const Tensor& positions,
                  float direction) {
  Fp32Staging stage(op);
  float* data = f32_arg(op, "x", stage.update("x", x));
  const float* freq = f32_arg(op, "inv_freq", inv_freq);
  ZT_CHECK(x.ndim == 4, op, ": x must be [B, T, H, D], got ", x.describe());
  const int64_t batch = x.dim(0), time = x.dim(1), heads = x.dim(2), head_dim = x.dim(3);
  ZT_CHECK(head_dim % 2 == 0, op, ": head dim D must be even, got ", x.describe());
  const int64_t half = head_dim / 2;
  expect_shape(op, "inv_freq", inv_freq, {half});
  // Absolute positions >= 0 (backend.h: a cached generation step starts past 0); the table
  // spans [lowest, last] of them: [0, T) for a training batch, one row for a generation step.
  const int32_t* position_of = nullptr;  // [B*T] or null (t)
  int64_t lowest = 0, last = time - 1;
  if (!positions.empty()) {
    position_of = i32_arg(op, "positions", positions);
    expect_numel(op, "positions", positions, batch * time, "B*T");
    const auto [low, high] = std::minmax_element(position_of, position_of + batch * time);
    if (batch * time > 0) lowest = *low, last = *high;
    ZT_CHECK(lowest >= 0, op, ": positions must be >= 0, got ", lowest);
  }
  const int64_t span = last - lowest + 1;
  // As HF: angle = position * inv_freq in fp32, then cos and sin in fp32. Table [span, D/2].
  std::vector<float> cos_table(static_cast<size_t>(std::max<int64_t>(span, 0) * half));
  std::vector<float> sin_table(cos_table.size());
#pragma omp parallel for schedule(static) if (span * half > 4096)
  for (int64_t row = 0; row < span; ++row) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(lowest + row) * freq[i];
      cos_table[static_cast<size_t>(row * half + i)] = std::cos(angle);
      sin_table[static_cast<size_t>(row * half + i)] = direction * std::sin(angle);
    }
  }
  // One (b, t) token per iteration: all its heads share the same cos/sin row.
#pragma omp parallel for schedule(static) if (x.numel() > kParallelThreshold)
  for (int64_t token = 0; token < batch * time; ++token) {
    const int64_t row = (position_of ? position_of[token] : token % time) - lowest;  // in [0, span)
    const float* cos_row = cos_table.data() + row * half;  // cos_row[D/2]
    const float* sin_row = sin_table.data() + row * half;  // sin_row[D/2]
    for (int64_t h = 0; h < heads; ++h) {
      float* first = data + (token * heads + h) * head_dim;  // first[D/2] = x1
      float* second = first + half;                         // second[D/2] = x2
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = first[i];
        const float x2 = second[i];
        // x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
        first[i] = x1 * cos_row[i] - x2 * sin_row[i];
        second[i] = x2 * cos_row[i] + x1 * sin_row[i];
      }
    }
  }
  stage.write_back();
}
}  // namespace

void CpuBackend::rope_forward(Tensor x, Tensor inv_freq, Tensor positions) {
  rotate_pairs("rope_forward", x, inv_freq, positions, 1.0f);
}

void CpuBackend::rope_backward(Tensor dx, Tensor inv_freq, Tensor positions) {
  rotate_pairs("rope_backward", dx, inv_freq, positions, -1.0f);
}

void CpuBackend::swiglu_forward(Tensor h, Tensor gate, Tensor up) {
  const char* op = "swiglu_forward";
  expect_same_dtype(op, "gate", gate, "h", h);
  expect_same_dtype(op, "up", up, "h", h);
  Fp32Staging stage(op);
  const float* gate_data = f32_arg(op, "gate", stage.read("gate", gate));
  const float* up_data = f32_arg(op, "up", stage.read("up", up));
  float* h_data = f32_arg(op, "h", stage.write("h", h));
  expect_same_shape(op, "gate", gate, "h", h);
  expect_same_shape(op, "up", up, "h", h);
  const int64_t n = h.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate_data[i];
    h_data[i] = g / (1.0f + vector_exp(-g)) * up_data[i];  // silu(g) = g / (1 + e^-g), as torch
  }
  stage.write_back();
}

void CpuBackend::swiglu_backward(Tensor dgate, Tensor dup, Tensor dh, Tensor gate, Tensor up) {
  const char* op = "swiglu_backward";
  expect_same_dtype(op, "dgate", dgate, "dh", dh);
  expect_same_dtype(op, "dup", dup, "dh", dh);
  expect_same_dtype(op, "gate", gate, "dh", dh);
  expect_same_dtype(op, "up", up, "dh", dh);
  Fp32Staging stage(op);
  const float* dh_data = f32_arg(op, "dh", stage.read("dh", dh));
  const float* gate_data = f32_arg(op, "gate", stage.read("gate", gate));
  const float* up_data = f32_arg(op, "up", stage.read("up", up));
  float* dgate_data = f32_arg(op, "dgate", stage.write("dgate", dgate));
  float* dup_data = f32_arg(op, "dup", stage.write("dup", dup));
  expect_same_shape(op, "dgate", dgate, "dh", dh);
  expect_same_shape(op, "dup", dup, "dh", dh);
  expect_same_shape(op, "gate", gate, "dh", dh);
  expect_same_shape(op, "up", up, "dh", dh);
  const int64_t n = dh.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate_data[i];
    const float u = up_data[i];
    const float grad = dh_data[i];
    const float sigmoid = vector_sigmoid(g);
    // silu'(g) = s + g s (1 - s) for s = sigmoid(g).
    const float silu_derivative = sigmoid * (1.0f + g * (1.0f - sigmoid));
    dgate_data[i] = grad * u * silu_derivative;
    dup_data[i] = grad * (g * sigmoid);
  }
  stage.write_back();
}

void CpuBackend::relu_forward(Tensor y, Tensor x) {
  const char* op = "relu_forward";
  expect_same_dtype(op, "x", x, "y", y);
  Fp32Staging stage(op);
  const float* x_data = f32_arg(op, "x", stage.read("x", x));  // before y: may alias
  float* y_data = f32_arg(op, "y", stage.write("y", y));
  expect_same_shape(op, "y", y, "x", x);
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) y_data[i] = x_data[i] < 0.0f ? 0.0f : x_data[i];  // NaN stays
  stage.write_back();
}

void CpuBackend::relu_backward(Tensor dx, Tensor dy, Tensor y) {
  const char* op = "relu_backward";
  expect_same_dtype(op, "dy", dy, "dx", dx);
  expect_same_dtype(op, "y", y, "dx", dx);
  Fp32Staging stage(op);
  const float* dy_data = f32_arg(op, "dy", stage.read("dy", dy));  // before dx: may alias
  const float* y_data = f32_arg(op, "y", stage.read("y", y));
  float* dx_data = f32_arg(op, "dx", stage.write("dx", dx));
  expect_same_shape(op, "dy", dy, "dx", dx);
  expect_same_shape(op, "y", y, "dx", dx);
  const int64_t n = dx.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) dx_data[i] = y_data[i] > 0.0f ? dy_data[i] : 0.0f;
  stage.write_back();
}

void CpuBackend::dropout(Tensor out, Tensor in, float p, RngKey key, Tensor row_ids) {
  const char* op = "dropout";
  expect_same_dtype(op, "in", in, "out", out);
  Fp32Staging stage(op);
  const float* in_data = f32_arg(op, "in", stage.read("in", in));  // before out: may alias
  const Matrix output = f32_matrix(op, "out", stage.write("out", out));
  expect_same_shape(op, "in", in, "out", out);
  const int64_t* row_id_data = i64_arg(op, "row_ids", row_ids);
  expect_numel(op, "row_ids", row_ids, output.rows, "one global position per row of out");
  ZT_CHECK(p >= 0.0f && p < 1.0f, op, ": probability p = ", p, " must be in [0, 1)");
  for (int64_t row = 0; row < output.rows; ++row) {
    ZT_CHECK(row_id_data[row] >= 0, op, ": row_ids[", row, "] = ", row_id_data[row], " is negative");
  }
  if (p == 0.0f) {  // identity (no random numbers drawn)
    const size_t bytes = static_cast<size_t>(output.numel()) * sizeof(float);
    if (output.data != in_data) std::memmove(output.data, in_data, bytes);
    stage.write_back();
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);
  const int64_t cols = output.cols;
#pragma omp parallel for schedule(static) if (output.numel() > 4096)
  for (int64_t row = 0; row < output.rows; ++row) {
    const uint64_t first_index = static_cast<uint64_t>(row_id_data[row] * cols);
    const float* in_row = in_data + row * cols;  // in_row[C]
    float* out_row = output.data + row * cols;   // out_row[C]
    for (int64_t c = 0; c < cols; ++c) {
      const bool keep = rng_uniform(key, first_index + static_cast<uint64_t>(c)) >= p;
      out_row[c] = keep ? in_row[c] * keep_scale : 0.0f;
    }
  }
  stage.write_back();
}

}  // namespace zt::cpu
