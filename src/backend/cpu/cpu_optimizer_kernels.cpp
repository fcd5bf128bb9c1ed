// CpuOptimizerKernels (cpu_optimizer_kernels.h), also what ZeRO-Offload runs on its host partitions.
// AdamW: argument checks, then the fused SIMD/OpenMP update cpu_adamw (backend/cpu/cpu_adam.h), which
// follows torch.optim.AdamW's operation order (single-tensor path). SGD and LAMB's per-element
// pass: OpenMP loops in torch.optim.SGD's and DeepSpeed FusedLamb's operation order.
#include "backend/cpu/cpu_optimizer_kernels.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_adam.h"
#include "backend/cpu/cpu_backend.h"  // the argument checks (f32_arg, ...)

namespace zt::cpu {

void CpuOptimizerKernels::adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                                const AdamWParams& params) {
  const char* op = "adamw";
  float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  float* m = f32_arg(op, "exp_avg", exp_avg);
  float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n =
      expect_numel_of_param(op, param, {{"grad", grad}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}});
  ZT_CHECK(params.step >= 1, op, ": step = ", params.step, " (steps count from 1)");
  cpu_adamw(p, g, m, v, n, params);
}

void CpuOptimizerKernels::adamw_fused(Tensor param, Tensor grad, float grad_scale, Tensor exp_avg, Tensor exp_avg_sq,
                                      const AdamWParams& params, Tensor param_out) {
  const char* op = "adamw_fused";
  float* p = f32_arg(op, "param", param);
  float* m = f32_arg(op, "exp_avg", exp_avg);
  float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n = expect_numel_of_param(op, param, {{"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}});
  ZT_CHECK(grad.device == Device::CPU && grad.numel() == n && (grad.data || n == 0), op, ": grad ", grad.describe(),
           " must be host memory with the ", n, " elements of param");
  ZT_CHECK(param_out.data == nullptr || (param_out.device == Device::CPU && param_out.numel() == n && param_out.data),
           op, ": param_out ", param_out.describe(), " must be empty or host memory with the ", n, " elements of param");
  ZT_CHECK(params.step >= 1, op, ": step = ", params.step, " (steps count from 1)");
  AdamWRoundedOut out;
  if (param_out.data) out = {static_cast<uint16_t*>(param_out.data), param_out.dtype};
  cpu_adamw_offload(p, {grad.data, grad.dtype, grad_scale}, m, v, n, params, out);
}

}  // namespace zt::cpu

namespace zt::cpu {

void CpuOptimizerKernels::sgd(Tensor param, Tensor grad, Tensor momentum_buffer, const SgdParams& params) {
  const char* op = "sgd";
  float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  const int64_t n = expect_numel_of_param(op, param, {{"grad", grad}});
  const bool has_momentum = params.momentum != 0.0;
  float* buf = nullptr;
  if (has_momentum) {
    buf = f32_arg(op, "momentum_buffer", momentum_buffer);
    expect_numel(op, "momentum_buffer", momentum_buffer, n, "the elements of param");
  }
  const float lr = static_cast<float>(params.lr), weight_decay = static_cast<float>(params.weight_decay);
  const float momentum = static_cast<float>(params.momentum);
  const float one_minus_dampening = static_cast<float>(1.0 - params.dampening);
  const bool first = params.first_step, nesterov = params.nesterov;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float d = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];  // grad.add(param, alpha=wd)
    if (has_momentum) {
      const float b = first ? d : buf[i] * momentum + one_minus_dampening * d;  // buf.mul_(m).add_(d, alpha=1-damp)
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = p[i] - lr * d;  // param.add_(d, alpha=-lr)
  }
}

void CpuOptimizerKernels::lamb_direction(Tensor update, Tensor param, Tensor grad, Tensor exp_avg,
                                         Tensor exp_avg_sq, const LambParams& params) {
  const char* op = "lamb_direction";
  float* u = f32_arg(op, "update", update);
  const float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  float* m = f32_arg(op, "exp_avg", exp_avg);
  float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n = expect_numel_of_param(
      op, param, {{"update", update}, {"grad", grad}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}});
  const float beta1 = static_cast<float>(params.beta1), beta2 = static_cast<float>(params.beta2);
  const float one_minus_beta1 = static_cast<float>(1.0 - params.beta1);
  const float one_minus_beta2 = static_cast<float>(1.0 - params.beta2);
  const float eps = static_cast<float>(params.eps), weight_decay = static_cast<float>(params.weight_decay);
  const bool inside = params.eps_inside_sqrt;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];  // read before writing u: update may alias grad
    const float mi = beta1 * m[i] + one_minus_beta1 * gi;
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = inside ? std::sqrt(vi + eps) : std::sqrt(vi) + eps;
    u[i] = mi / denom + weight_decay * p[i];
  }
}

}  // namespace zt::cpu

namespace zt::cpu {

namespace {
int64_t packed_bytes(int64_t n) { return (n + 7) / 8; }
}  // namespace

// One byte (8 elements) per iteration, so that threads never share a byte.
void CpuOptimizerKernels::pack_signs(Tensor bits, Tensor error, Tensor x, float scale) {
  const char* op = "pack_signs";
  const float* in = f32_arg(op, "x", x);
  float* e = f32_arg(op, "error", error);
  const int64_t n = x.numel();
  expect_numel(op, "error", error, n, "the elements of x");
  expect_host(op, "bits", bits, DType::U8);
  uint8_t* packed = static_cast<uint8_t*>(bits.data);
  expect_numel(op, "bits", bits, packed_bytes(n), "ceil(elements of x / 8)");
#pragma omp parallel for schedule(static)
  for (int64_t byte = 0; byte < packed_bytes(n); ++byte) {
    uint8_t value = 0;
    for (int64_t i = byte * 8; i < std::min(n, byte * 8 + 8); ++i) {
      const bool positive = in[i] >= 0.0f;  // NaN packs as -1: the overflow check has run before
      if (positive) value = static_cast<uint8_t>(value | (0x80u >> (i % 8)));
      e[i] = in[i] - (positive ? scale : -scale);
    }
    packed[byte] = value;
  }
}

void CpuOptimizerKernels::add_signs(Tensor out, Tensor bits, float scale) {
  const char* op = "add_signs";
  float* o = f32_arg(op, "out", out);
  const int64_t n = out.numel();
  const uint8_t* packed = u8_arg(op, "bits", bits);
  expect_numel(op, "bits", bits, packed_bytes(n), "ceil(elements of out / 8)");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] += (packed[i / 8] & (0x80u >> (i % 8))) ? scale : -scale;
}

void CpuOptimizerKernels::adam_denominator_scale(Tensor x, Tensor exp_avg_sq, float eps, bool divide) {
  const char* op = "adam_denominator_scale";
  float* values = f32_arg(op, "x", x);
  const float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n = x.numel();
  expect_numel(op, "exp_avg_sq", exp_avg_sq, n, "the elements of x");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float denominator = std::sqrt(v[i]) + eps;
    values[i] = divide ? values[i] / denominator : values[i] * denominator;
  }
}

}  // namespace zt::cpu

// ---- AdaLomo's factored second moment --------------------------------------------------------

namespace zt::cpu {

void CpuOptimizerKernels::adalomo_square_sums(Tensor row_sums, Tensor col_sums, Tensor grad, int64_t offset,
                                              float eps) {
  const char* op = "adalomo_square_sums";
  float* rows_out = f32_arg(op, "row_sums", row_sums);
  float* cols_out = col_sums.empty() ? nullptr : f32_arg(op, "col_sums", col_sums);  // empty: a vector
  const float* g = f32_arg(op, "grad", grad);
  const AdalomoShape shape = adalomo_shape(op, "row_sums", row_sums, "col_sums", col_sums, grad, offset);
  const int64_t n = grad.numel(), cols = shape.cols;
  std::fill(rows_out, rows_out + shape.rows, 0.0f);
  if (cols_out) std::fill(cols_out, cols_out + cols, 0.0f);
  if (n == 0) return;
  const int64_t first_row = offset / cols, last_row = (offset + n - 1) / cols;
  // Row r's elements in grad: [max(r C - offset, 0), min((r + 1) C - offset, n)).
  const auto row_begin = [&](int64_t r) { return std::max<int64_t>(r * cols - offset, 0); };
  const auto row_end = [&](int64_t r) { return std::min<int64_t>((r + 1) * cols - offset, n); };
#pragma omp parallel for schedule(static)
  for (int64_t r = first_row; r <= last_row; ++r) {
    double sum = 0.0;
    for (int64_t i = row_begin(r); i < row_end(r); ++i) sum += static_cast<double>(g[i] * g[i] + eps);
    rows_out[r] = static_cast<float>(sum);
  }
  if (!cols_out) return;
  // Columns: each thread a block of columns, the rows in order (the same sums whatever the threads).
  constexpr int64_t kBlock = 256;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < (cols + kBlock - 1) / kBlock; ++block) {
    const int64_t c0 = block * kBlock, width = std::min(kBlock, cols - c0);
    double sums[kBlock] = {};  // sums[width]: this block's column sums
    for (int64_t r = first_row; r <= last_row; ++r) {
      const int64_t at = r * cols - offset + c0;  // column c0 of row r, in grad
      const int64_t lo = std::max(row_begin(r), at), hi = std::min(row_end(r), at + width);
      for (int64_t i = lo; i < hi; ++i) sums[i - at] += static_cast<double>(g[i] * g[i] + eps);
    }
    for (int64_t c = 0; c < width; ++c) cols_out[c0 + c] = static_cast<float>(sums[c]);
  }
}

double CpuOptimizerKernels::adalomo_moments(Tensor row, Tensor col, Tensor row_sums, Tensor col_sums, float beta2t) {
  const char* op = "adalomo_moments";
  float* r = f32_arg(op, "row", row);
  const float* rs = f32_arg(op, "row_sums", row_sums);
  expect_numel(op, "row_sums", row_sums, row.numel(), "the elements of row");
  ZT_CHECK(row.numel() > 0, op, ": row has no elements (the tensor has at least one row)");
  ZT_CHECK(col.empty() == col_sums.empty(), op, ": col and col_sums must both be given (a matrix) or both be empty "
           "(a vector)");
  float* c = col.empty() ? nullptr : f32_arg(op, "col", col);
  const float* cs = col.empty() ? nullptr : f32_arg(op, "col_sums", col_sums);
  if (c) expect_numel(op, "col_sums", col_sums, col.numel(), "the elements of col");
  const int64_t rows = row.numel(), cols = c ? col.numel() : 1;
  const float keep = beta2t, take = 1.0f - beta2t;
  // As torch: the mean first (sum / count), then state.mul_(beta2t).add_(mean, alpha=1 - beta2t).
  double row_total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    r[i] = r[i] * keep + take * (rs[i] / static_cast<float>(cols));
    row_total += r[i];
  }
  for (int64_t j = 0; c && j < cols; ++j) c[j] = c[j] * keep + take * (cs[j] / static_cast<float>(rows));
  return row_total / static_cast<double>(rows);
}

void CpuOptimizerKernels::adalomo_direction(Tensor update, Tensor grad, Tensor row, Tensor col, int64_t offset,
                                            float row_mean) {
  const char* op = "adalomo_direction";
  float* u = f32_arg(op, "update", update);
  const float* g = f32_arg(op, "grad", grad);
  const float* r = f32_arg(op, "row", row);
  const float* c = col.empty() ? nullptr : f32_arg(op, "col", col);
  expect_numel(op, "update", update, grad.numel(), "the elements of grad");
  const AdalomoShape shape = adalomo_shape(op, "row", row, "col", col, grad, offset);
  const int64_t n = grad.numel(), cols = shape.cols;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = offset + i;  // (at / C, at % C) in the tensor
    // torch: (row / row.mean()).rsqrt_() [R, 1] * col.rsqrt() [1, C], then .mul_(grad)
    const float factor = c ? (1.0f / std::sqrt(r[at / cols] / row_mean)) * (1.0f / std::sqrt(c[at % cols]))
                           : 1.0f / std::sqrt(r[at]);
    u[i] = factor * g[i];
  }
}

}  // namespace zt::cpu
