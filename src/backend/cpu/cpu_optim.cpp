// The CPU backend's optimizer ops (also what ZeRO-Offload runs on its host partitions).
// AdamW: argument checks, then the fused SIMD/OpenMP update cpu_adamw (optim/cpu_adam.h), which
// follows torch.optim.AdamW's operation order (single-tensor path). SGD and LAMB's per-element
// pass: OpenMP loops in torch.optim.SGD's and DeepSpeed FusedLamb's operation order.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "optim/cpu_adam.h"

namespace zt::cpu {

void CpuBackend::adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                       const AdamWParams& params) {
  const char* op = "adamw";
  float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  float* m = f32_arg(op, "exp_avg", exp_avg);
  float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n = param.numel();
  expect_numel(op, "grad", grad, n, "the elements of param");
  expect_numel(op, "exp_avg", exp_avg, n, "the elements of param");
  expect_numel(op, "exp_avg_sq", exp_avg_sq, n, "the elements of param");
  ZT_CHECK(params.step >= 1, op, ": step = ", params.step, " (steps count from 1)");
  cpu_adamw(p, g, m, v, n, params);
}

}  // namespace zt::cpu

namespace zt::cpu {

void CpuBackend::sgd(Tensor param, Tensor grad, Tensor momentum_buffer, const SgdParams& params) {
  const char* op = "sgd";
  float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  const int64_t n = param.numel();
  expect_numel(op, "grad", grad, n, "the elements of param");
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

void CpuBackend::lamb_direction(Tensor update, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                                const LambParams& params) {
  const char* op = "lamb_direction";
  float* u = f32_arg(op, "update", update);
  const float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  float* m = f32_arg(op, "exp_avg", exp_avg);
  float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n = param.numel();
  expect_numel(op, "update", update, n, "the elements of param");
  expect_numel(op, "grad", grad, n, "the elements of param");
  expect_numel(op, "exp_avg", exp_avg, n, "the elements of param");
  expect_numel(op, "exp_avg_sq", exp_avg_sq, n, "the elements of param");
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
void CpuBackend::pack_signs(Tensor bits, Tensor error, Tensor x, float scale) {
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

void CpuBackend::add_signs(Tensor out, Tensor bits, float scale) {
  const char* op = "add_signs";
  float* o = f32_arg(op, "out", out);
  const int64_t n = out.numel();
  const uint8_t* packed = u8_arg(op, "bits", bits);
  expect_numel(op, "bits", bits, packed_bytes(n), "ceil(elements of out / 8)");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] += (packed[i / 8] & (0x80u >> (i % 8))) ? scale : -scale;
}

}  // namespace zt::cpu
