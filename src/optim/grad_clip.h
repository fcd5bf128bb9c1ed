// Gradient clipping by the global norm, with DeepSpeed's coefficient.
#pragma once

namespace zt {

// The number to DIVIDE every gradient by so that the global norm is at most max_norm:
//   coef = max(1, (total_norm + 1e-6) / max_norm),   1 when max_norm <= 0 (clipping off).
// total_norm is the norm of the unscaled gradients (after dividing out any fp16 loss scale).
// This is DeepSpeed's rule on every path: ZeRO 1/2/3 and the fp16 optimizer divide by
// clamp(((norm/scale) + 1e-6) / clip, min=1) (unscale_and_clip_grads); the fp32 and bf16 paths
// multiply by min(1, clip / (norm + 1e-6)) (runtime/utils.py clip_grad_norm_,
// clip_tensors_by_global_norm), which is the same factor. Note the 1e-6: a norm equal to
// max_norm is still divided by 1 + 1e-6/max_norm, as in DeepSpeed.
// A non-finite total_norm gives NaN when clipping is on: the caller must skip such a step
// (fp16 overflow) rather than clip it.
float clip_coefficient(double total_norm, double max_norm);

}  // namespace zt
