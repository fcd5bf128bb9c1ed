// SGD (torch.optim.SGD): momentum, dampening, Nesterov, and L2 weight decay added to the gradient
// (torch's coupled decay), on the decay group only as the trainer groups parameters (HF's
// no-decay rule for norms and biases). State: momentum_buffer, only when momentum is not 0.
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config);

}  // namespace zt
