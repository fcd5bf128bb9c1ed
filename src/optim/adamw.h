// AdamW (torch.optim.AdamW / DeepSpeed's FusedAdam and CPU Adam with adam_w_mode): decoupled
// weight decay on the decay group, bias-corrected moments exp_avg and exp_avg_sq.
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config);

}  // namespace zt
