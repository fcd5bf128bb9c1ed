// cpu_adamw: the AdamW update over fp32 host arrays, written for speed (ZeRO-Offload updates the
// fp32 master partition and its moments on the CPU). One pass over memory, OpenMP over chunks,
// one branch-free loop body compiled for each ISA path of cpu_isa.h (AVX-512, AVX2, generic)
// and chosen at run time, so that a portable build (no -march=native) still runs at the node's
// SIMD width. The operation order is torch.optim.AdamW's single-tensor path and the file is
// compiled without multiply-add contraction, so every path gives the same bits, whatever the
// build's -march, and rounds each operation as the CUDA kernel
// (backend/cuda/cuda_optimizer_kernels.cu) does. (torch's CPU lerp_ fuses its multiply-add:
// exp_avg differs from torch's by an ulp or so of m per step, see test_cpu_ops'
// adamw_matches_torch.)
#pragma once
#include <cstdint>

#include "backend/optimizer_kernels.h"  // AdamWParams
#include "backend/cpu/cpu_isa.h"
#include "core/dtype.h"

namespace zt {

// One AdamW step over n elements, in place:
//   param      fp32 [n]  p <- p (1 - lr wd) - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   grad       fp32 [n]  read only
//   exp_avg    fp32 [n]  m <- lerp(m, g, 1 - beta1)
//   exp_avg_sq fp32 [n]  v <- beta2 v + (1 - beta2) g^2
//   param_bf16_out  bf16 bits [n] or nullptr: when given, also receives the updated parameter
//                   rounded to bf16 (RNE, as float_to_bf16), written in the same pass; this is
//                   what offload copies back to the device for bf16 compute.
// The arrays must not overlap. n may be 0. params.step >= 1 (bias correction counts from 1).
// Runs the path cpu_isa() chose (the best this CPU has, or ZT_CPU_ISA's).
void cpu_adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamWParams& params, uint16_t* param_bf16_out = nullptr);

// The same on a given path (tests and benchmarks compare them); an error if this CPU cannot run it.
void cpu_adamw_on(CpuIsa isa, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWParams& params, uint16_t* param_bf16_out = nullptr);

// ZeRO-Offload's host update in one pass (ZeroEngine's offload step): the gradient in its
// stored dtype, multiplied by `scale` (the engine's 1 / (loss scale x clip coefficient)), and the
// updated parameter rounded to the compute dtype in the same pass. The bits are those of the
// separate passes: widen (exact), g * scale in fp32, cpu_adamw, round (RNE, as float_to_bf16 /
// float_to_fp16).
struct AdamWGradient {
  const void* data = nullptr;  // [n] of dtype
  DType dtype = DType::F32;    // fp32, bf16 or fp16
  float scale = 1.0f;
};
struct AdamWRoundedOut {
  uint16_t* data = nullptr;    // [n] or nullptr: no rounded copy
  DType dtype = DType::BF16;   // bf16 or fp16
};
void cpu_adamw_offload(float* param, AdamWGradient grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWParams& params, AdamWRoundedOut out);
void cpu_adamw_offload_on(CpuIsa isa, float* param, AdamWGradient grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                          const AdamWParams& params, AdamWRoundedOut out);

}  // namespace zt
