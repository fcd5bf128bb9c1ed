// adamw_constants (see adamw_constants.h): torch's double-precision scalars, rounded once.
#include "backend/adamw_constants.h"

#include <cmath>

namespace zt {

AdamWConstants adamw_constants(const AdamWParams& params) {
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = params.bias_correction ? 1.0 - std::pow(params.beta1, step) : 1.0;
  const double bias_correction2 = params.bias_correction ? 1.0 - std::pow(params.beta2, step) : 1.0;
  AdamWConstants c;
  c.decay_factor = static_cast<float>(1.0 - params.lr * params.weight_decay);
  c.lerp_weight = static_cast<float>(1.0 - params.beta1);
  c.lerp_complement = 1.0f - c.lerp_weight;
  c.lerp_from_start = std::fabs(c.lerp_weight) < 0.5f;
  c.beta2 = static_cast<float>(params.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - params.beta2);
  c.negative_step_size = static_cast<float>(-(params.lr / bias_correction1));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(params.eps);
  return c;
}

}  // namespace zt
