// LOMO (Lv et al. 2023, "Full Parameter Fine-tuning for Large Language Models with Limited
// Resources"; OpenLMLab/LOMO's lomo_optim.Lomo): plain SGD fused into backward. Each unit's
// gradient is reduced and applied as soon as backward completes it and its memory is given back,
// so no full gradient buffer exists. Per element, as Lomo's hook:
//   g = clamp(g / loss_scale, -clip_grad_value, clip_grad_value)   (when clip_grad_value > 0)
//   g = g x clip_coef                                                (clipping by the global norm)
//   p = p (1 - lr wd) - lr g                                         (decay on the decay group)
// Clipping by the global norm needs the norm before any update: as LOMO's grad_norm(), a first
// backward only measures it (and, for fp16, finds an overflow, which skips the step), a second
// one updates. No state.
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_lomo(const OptimizerConfig& config);

// LOMO's (and AdaLomo's) clip_grad_value (0: off) on a gradient the engine has already divided by
// the loss scale and the clip coefficient: LOMO clamps before multiplying by the clip
// coefficient, and clamp(x, +-v) / c = clamp(x / c, +-v / c) for c >= 1.
void clamp_gradient_values(Backend& backend, Tensor grad, double clip_grad_value, const OptimizerStep& step);

}  // namespace zt
