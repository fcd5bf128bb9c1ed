// 1-bit Adam with DeepSpeed OneBitAdam's semantics (deepspeed/runtime/fp16/onebit/adam.py):
//   warm-up, updates 1 .. freeze_step (gradients reduced as for AdamW):
//     m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2          (no bias correction)
//   compression, updates after freeze_step: v frozen; each rank's  b1 m + (1 - b1) g_local  is
//     averaged over the ranks as signs with error feedback (the engine's momentum exchange), and
//     m = that average
//   both: p -= lr (m / (sqrt(v) + eps) + wd p)                   (decoupled weight decay)
// Difference from DeepSpeed: its first step() call only initialises (the gradient is dropped and
// counts towards freeze_step); here the first update is a real one, so freeze_step counts updates.
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_onebit_adam(const OptimizerConfig& config);

}  // namespace zt
