// AdamW's per-step constants, shared by the CPU kernel (backend/cpu/cpu_adam.cpp) and the CUDA
// kernel (backend/cuda/cuda_optimizer_kernels.cu), so that both round the same fp32 constants
// and agree with each other bit for bit. The only place they are computed.
#pragma once

#include "backend/optimizer_kernels.h"  // AdamWParams

namespace zt {

// The constants of one AdamW step, computed the way torch computes them: in double (its Python
// floats), then rounded once to fp32 for the element loop. A plain struct: the CUDA kernel
// takes it by value as a launch argument.
struct AdamWConstants {
  float decay_factor;           // 1 - lr * weight_decay
  float lerp_weight;            // 1 - beta1
  float lerp_complement;        // 1 - lerp_weight (in fp32, as torch's lerp kernel forms it)
  bool lerp_from_start;         // |lerp_weight| < 0.5: torch's lerp is m + w (g - m), else g - (g - m)(1 - w)
  float beta2;
  float one_minus_beta2;
  float negative_step_size;     // -lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
};

// params.step >= 1 (the callers check it, naming their op).
AdamWConstants adamw_constants(const AdamWParams& params);

}  // namespace zt
