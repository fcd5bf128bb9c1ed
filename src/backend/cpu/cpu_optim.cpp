// The CPU backend's AdamW update: one fused pass over param, grad, exp_avg, exp_avg_sq with the
// operation order of torch.optim.AdamW (single-tensor path), so results match it bit for bit
// up to the compiler's choice of fused multiply-adds.
#include <cmath>

#include "backend/cpu/cpu_backend.h"

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
  // Scalars as torch computes them: in double (Python floats), then used as fp32 in the kernel.
  const double lr = params.lr, beta1 = params.beta1;
  const double beta2 = params.beta2, weight_decay = params.weight_decay;
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = params.bias_correction ? 1.0 - std::pow(beta1, step) : 1.0;
  const double bias_correction2 = params.bias_correction ? 1.0 - std::pow(beta2, step) : 1.0;
  const float decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  const float b2 = static_cast<float>(beta2);
  // exp_avg.lerp_(grad, w) with w = 1 - beta1; torch's lerp takes the form that is exact at
  // the nearer end: m + w (g - m) for w < 0.5, else g - (g - m)(1 - w).
  const float lerp_weight = static_cast<float>(1.0 - beta1);
  const bool lerp_from_start = std::fabs(lerp_weight) < 0.5f;
  const float lerp_complement = 1.0f - lerp_weight;
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  const float negative_step_size = static_cast<float>(-(lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(params.eps);
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float pi = p[i] * decay_factor;               // param.mul_(1 - lr * wd)
    const float mi = lerp_from_start ? m[i] + lerp_weight * (gi - m[i])  // exp_avg.lerp_(g, w)
                                     : gi - (gi - m[i]) * lerp_complement;
    const float vi = v[i] * b2 + one_minus_b2 * gi * gi;  // exp_avg_sq.mul_().addcmul_()
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + negative_step_size * mi / denom;        // param.addcdiv_(m, denom, -step_size)
  }
}

}  // namespace zt::cpu
