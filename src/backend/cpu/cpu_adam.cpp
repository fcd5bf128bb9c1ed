// cpu_adamw (see cpu_adam.h): the constants of backend/adamw_constants.h, then a branch-free
// SIMD loop per chunk, chunks spread over the OpenMP threads.
#include "backend/cpu/cpu_adam.h"

#include <algorithm>
#include <cmath>

#include "backend/adamw_constants.h"
#include "core/dtype.h"
#include "core/error.h"

namespace zt {

namespace {

// The update over one span of n elements. kLerpFromStart picks torch's lerp form at compile
// time so the loop has no branch: exp_avg.lerp_(grad, w) is m + w (g - m) for w < 0.5, else
// g - (g - m)(1 - w) (the form that is exact at the nearer end).
template <bool kLerpFromStart>
void adamw_span(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                int64_t n, const AdamWConstants& s) {
  const float decay_factor = s.decay_factor, lerp_weight = s.lerp_weight, lerp_complement = s.lerp_complement;
  const float beta2 = s.beta2, one_minus_beta2 = s.one_minus_beta2, negative_step_size = s.negative_step_size;
  const float bias_correction2_sqrt = s.bias_correction2_sqrt, eps = s.eps;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float pi = p[i] * decay_factor;                 // param.mul_(1 - lr * wd)
    const float mi = kLerpFromStart ? m[i] + lerp_weight * (gi - m[i])  // exp_avg.lerp_(g, 1 - beta1)
                                    : gi - (gi - m[i]) * lerp_complement;
    const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;  // (v.sqrt() / sqrt(bc2)).add_(eps)
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + negative_step_size * mi / denom;          // param.addcdiv_(m, denom, -step_size)
  }
}

// Elements per task: 16 KiB of each fp32 array, so the chunk's updated parameters are still in
// L1/L2 when its bf16 copy is written (the bf16 output costs no second trip to memory).
constexpr int64_t kChunk = 4096;

template <bool kLerpFromStart>
void adamw_chunks(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWConstants& s, uint16_t* param_bf16_out) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // Static schedule: each thread walks one contiguous range of chunks (hardware prefetch).
#pragma omp parallel for schedule(static) if (chunks > 8)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    const int64_t count = std::min(kChunk, n - begin);
    float* p = param + begin;
    adamw_span<kLerpFromStart>(p, grad + begin, exp_avg + begin, exp_avg_sq + begin, count, s);
    if (param_bf16_out != nullptr) {
      uint16_t* out = param_bf16_out + begin;
      for (int64_t i = 0; i < count; ++i) out[i] = float_to_bf16(p[i]);
    }
  }
}

}  // namespace

void cpu_adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamWParams& params, uint16_t* param_bf16_out) {
  ZT_CHECK(n >= 0, "cpu_adamw: n = ", n, " elements (must be >= 0)");
  ZT_CHECK(params.step >= 1, "cpu_adamw: step = ", params.step, " (steps count from 1)");
  if (n == 0) return;
  ZT_CHECK(param && grad && exp_avg && exp_avg_sq, "cpu_adamw: a null array for ", n, " elements");
  const AdamWConstants s = adamw_constants(params);
  if (s.lerp_from_start)
    adamw_chunks<true>(param, grad, exp_avg, exp_avg_sq, n, s, param_bf16_out);
  else
    adamw_chunks<false>(param, grad, exp_avg, exp_avg_sq, n, s, param_bf16_out);
}

}  // namespace zt
