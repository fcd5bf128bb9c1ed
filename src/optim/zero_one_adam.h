// 0/1 Adam with DeepSpeed ZeroOneAdam's semantics (deepspeed/runtime/fp16/onebit/zoadam.py).
// DeepSpeed's step s is zerotune's update t = s - 1 (DeepSpeed's first step() call only
// initialises: its gradient is dropped), so every schedule below is DeepSpeed's, in its s:
//   variance phase, s <= var_freeze_step + 1:
//     variance steps (s = 2 .. var_update_scaler + 1 one by one, then every 2nd s for
//     var_update_scaler of them, every 4th, ...): gradients reduced exactly,
//       m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//     the other steps: the ranks' local gradients averaged as signs with error feedback
//       (the momentum exchange with the gradient alone), m = b1 m + (1 - b1) that average; v kept
//   local phase, s > var_freeze_step + 1 (v frozen; the error feedback is zeroed once): each rank
//     m = b1 m + (1 - b1) g_local;  u = m / (sqrt(v) + eps) + wd p;  p -= lr u;  acc -= lr u
//     and when s % local_step_interval == 0 (1 for local_step_scaler steps, then 2, 4, ... at most
//     local_step_clipper) the ranks synchronise:
//       p -= acc;  A = average over the ranks of acc (sqrt(v) + eps)  (signs, error feedback)
//       m = -A / lrs;  p += A / (sqrt(v) + eps);  acc = 0   (lrs: the sum of lr since the last one)
//   every update: p -= lr (m / (sqrt(v) + eps) + wd p)  (no bias correction, decoupled decay)
// Differences from DeepSpeed: on one rank the compressed-gradient steps take the gradient itself
// (DeepSpeed leaves m unchanged there); a resume continues the schedules (DeepSpeed restarts its
// intervals and drops the accumulator on every load).
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_zero_one_adam(const OptimizerConfig& config);

// The schedules, in zerotune's update numbers t (1 for the first update).
bool zero_one_adam_variance_update(const OptimizerConfig& config, int64_t update_number);
int64_t zero_one_adam_local_interval(const OptimizerConfig& config, int64_t update_number);

}  // namespace zt
