// Gradient clipping coefficient (DeepSpeed's rule, see grad_clip.h).
#include "optim/grad_clip.h"

#include <cmath>
#include <limits>

namespace zt {

float clip_coefficient(double total_norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0f;  // 0 (DeepSpeed's default) disables clipping
  if (!std::isfinite(total_norm)) return std::numeric_limits<float>::quiet_NaN();
  const double ratio = (total_norm + 1e-6) / max_norm;  // DeepSpeed's epsilon
  return ratio > 1.0 ? static_cast<float>(ratio) : 1.0f;
}

}  // namespace zt
