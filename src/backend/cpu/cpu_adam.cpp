// cpu_adamw (see cpu_adam.h): the constants of backend/adamw_constants.h, then one chunk body
// instantiated per ISA path (GCC target attributes), the chunks spread over the OpenMP threads.
// This file is compiled with -ffp-contract=off and for the baseline ISA (CMakeLists.txt): the
// generic path is the same code in -march=native and portable builds, and no path fuses a
// multiply-add that torch rounds twice.
#include "backend/cpu/cpu_adam.h"

#include <algorithm>
#include <cmath>

#include "backend/adamw_constants.h"
#include "core/dtype.h"
#include "core/error.h"

namespace zt {

namespace {

// Elements per task: 16 KiB of each fp32 array, so the chunk's updated parameters are still in
// L1/L2 when its 16-bit copy is written (that pass costs no second trip to memory).
constexpr int64_t kChunk = 4096;

// The arrays of one update (cpu_adam.h): the gradient in its dtype with its scale, the rounded
// output in its dtype or null.
struct AdamWArrays {
  float* param;
  AdamWGradient grad;
  float* exp_avg;
  float* exp_avg_sq;
  AdamWRoundedOut out;
};

// Element i of the gradient in fp32, times its scale (one rounding, as the engine's separate
// widen and scale passes round; x 1 is exact): fp32, or bf16 / fp16 (kGradient) widened exactly.
template <DType kGradient>
[[gnu::always_inline]] inline float scaled_gradient(const void* __restrict data, int64_t i, float scale) {
  if constexpr (kGradient == DType::F32) return static_cast<const float*>(data)[i] * scale;
  if constexpr (kGradient == DType::BF16) return bf16_to_float(static_cast<const uint16_t*>(data)[i]) * scale;
  if constexpr (kGradient == DType::F16) return fp16_to_float(static_cast<const uint16_t*>(data)[i]) * scale;
}

// The chunk's updated parameters rounded to the output's dtype (RNE), while they are in L1/L2.
[[gnu::always_inline]] inline void round_chunk(const AdamWRoundedOut& out, const float* __restrict p, int64_t begin,
                                               int64_t count) {
  if (out.data == nullptr) return;
  uint16_t* __restrict o = out.data + begin;
  if (out.dtype == DType::BF16) {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) o[i] = float_to_bf16(p[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) o[i] = float_to_fp16(p[i]);
  }
}

// The update of elements [begin, begin + count) (count <= kChunk), then their rounded copy.
// kLerpFromStart picks torch's lerp form at compile time so the loop has no branch:
// exp_avg.lerp_(grad, w) is m + w (g - m) for w < 0.5, else g - (g - m)(1 - w) (the form that is
// exact at the nearer end). Always inlined into each ISA's entry point below: that is what
// vectorises this one body once per ISA. kGradient: the gradient's dtype, widened and scaled
// inside the loop (no staging of an fp32 copy through L1: the fp16 step with its loss scale ran at
// 0.76 of the bandwidth bound that way, 0.85 inline; BENCHMARKS.md).
template <bool kLerpFromStart, DType kGradient>
[[gnu::always_inline]] inline void adamw_chunk(const AdamWArrays& a, int64_t begin, int64_t count,
                                               const AdamWConstants& c) {
  const char* __restrict g = static_cast<const char*>(a.grad.data) + begin * static_cast<int64_t>(dtype_size(kGradient));
  const float grad_scale = a.grad.scale;
  float* __restrict p = a.param + begin;
  float* __restrict m = a.exp_avg + begin;
  float* __restrict v = a.exp_avg_sq + begin;
  const float decay_factor = c.decay_factor, lerp_weight = c.lerp_weight, lerp_complement = c.lerp_complement;
  const float beta2 = c.beta2, one_minus_beta2 = c.one_minus_beta2, negative_step_size = c.negative_step_size;
  const float bias_correction2_sqrt = c.bias_correction2_sqrt, eps = c.eps;
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    const float gi = scaled_gradient<kGradient>(g, i, grad_scale);
    const float pi = p[i] * decay_factor;                 // param.mul_(1 - lr * wd)
    const float mi = kLerpFromStart ? m[i] + lerp_weight * (gi - m[i])  // exp_avg.lerp_(g, 1 - beta1)
                                    : gi - (gi - m[i]) * lerp_complement;
    const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;  // (v.sqrt() / sqrt(bc2)).add_(eps)
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + negative_step_size * mi / denom;          // param.addcdiv_(m, denom, -step_size)
  }
  round_chunk(a.out, p, begin, count);
}

// One entry point per ISA path, each the body above compiled for its ISA. AVX2 without FMA
// (the file has no contraction anyway); AVX-512 at full width (GCC's generic tuning may
// otherwise prefer 256-bit vectors).
using ChunkFunction = void (*)(const AdamWArrays&, int64_t, int64_t, const AdamWConstants&);

template <bool kLerpFromStart, DType kGradient>
void chunk_generic(const AdamWArrays& a, int64_t begin, int64_t count, const AdamWConstants& c) {
  adamw_chunk<kLerpFromStart, kGradient>(a, begin, count, c);
}

#if defined(__x86_64__)
template <bool kLerpFromStart, DType kGradient>
[[gnu::target("avx2")]] void chunk_avx2(const AdamWArrays& a, int64_t begin, int64_t count,
                                        const AdamWConstants& c) {
  adamw_chunk<kLerpFromStart, kGradient>(a, begin, count, c);
}

template <bool kLerpFromStart, DType kGradient>
[[gnu::target("avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512")]] void chunk_avx512(
    const AdamWArrays& a, int64_t begin, int64_t count, const AdamWConstants& c) {
  adamw_chunk<kLerpFromStart, kGradient>(a, begin, count, c);
}
#endif

template <bool kLerpFromStart, DType kGradient>
ChunkFunction chunk_function(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::avx512) return chunk_avx512<kLerpFromStart, kGradient>;
  if (isa == CpuIsa::avx2) return chunk_avx2<kLerpFromStart, kGradient>;
#endif
  ZT_CHECK(isa == CpuIsa::generic, "cpu_adamw: no ", cpu_isa_name(isa), " path in this build (not x86-64)");
  return chunk_generic<kLerpFromStart, kGradient>;
}

template <bool kLerpFromStart>
ChunkFunction chunk_function(CpuIsa isa, DType gradient) {
  if (gradient == DType::BF16) return chunk_function<kLerpFromStart, DType::BF16>(isa);
  if (gradient == DType::F16) return chunk_function<kLerpFromStart, DType::F16>(isa);
  return chunk_function<kLerpFromStart, DType::F32>(isa);
}

ChunkFunction chunk_function(CpuIsa isa, bool lerp_from_start, DType gradient) {
  return lerp_from_start ? chunk_function<true>(isa, gradient) : chunk_function<false>(isa, gradient);
}

void run_chunks(ChunkFunction chunk, const AdamWArrays& a, int64_t n, const AdamWConstants& c) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // Static schedule: each thread walks one contiguous range of chunks (hardware prefetch), the
  // same range every step (its pages stay in its caches and, where first touched by it, on its
  // NUMA node).
#pragma omp parallel for schedule(static) if (chunks > 8)
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t begin = i * kChunk;
    chunk(a, begin, std::min(kChunk, n - begin), c);
  }
}

}  // namespace

void cpu_adamw_offload_on(CpuIsa isa, float* param, AdamWGradient grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                          const AdamWParams& params, AdamWRoundedOut out) {
  ZT_CHECK(n >= 0, "cpu_adamw: n = ", n, " elements (must be >= 0)");
  ZT_CHECK(params.step >= 1, "cpu_adamw: step = ", params.step, " (steps count from 1)");
  ZT_CHECK(cpu_supports(isa, cpu_features()), "cpu_adamw: this CPU cannot run the ", cpu_isa_name(isa), " path");
  ZT_CHECK(grad.dtype == DType::F32 || grad.dtype == DType::BF16 || grad.dtype == DType::F16,
           "cpu_adamw: the gradient is ", dtype_name(grad.dtype), ", not fp32, bf16 or fp16");
  ZT_CHECK(out.data == nullptr || out.dtype == DType::BF16 || out.dtype == DType::F16,
           "cpu_adamw: the rounded output is ", dtype_name(out.dtype), ", not bf16 or fp16");
  if (n == 0) return;
  ZT_CHECK(param && grad.data && exp_avg && exp_avg_sq, "cpu_adamw: a null array for ", n, " elements");
  const AdamWConstants c = adamw_constants(params);
  const ChunkFunction chunk = chunk_function(isa, c.lerp_from_start, grad.dtype);
  run_chunks(chunk, {param, grad, exp_avg, exp_avg_sq, out}, n, c);
}

void cpu_adamw_offload(float* param, AdamWGradient grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWParams& params, AdamWRoundedOut out) {
  cpu_adamw_offload_on(cpu_isa(), param, grad, exp_avg, exp_avg_sq, n, params, out);
}

void cpu_adamw_on(CpuIsa isa, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWParams& params, uint16_t* param_bf16_out) {
  cpu_adamw_offload_on(isa, param, {grad, DType::F32, 1.0f}, exp_avg, exp_avg_sq, n, params,
                       {param_bf16_out, DType::BF16});
}

void cpu_adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamWParams& params, uint16_t* param_bf16_out) {
  cpu_adamw_on(cpu_isa(), param, grad, exp_avg, exp_avg_sq, n, params, param_bf16_out);
}

}  // namespace zt
