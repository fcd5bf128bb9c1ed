// LAMB with DeepSpeed FusedLamb's semantics (deepspeed/ops/lamb/fused_lamb.py and its kernel):
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2                 (raw moments)
//   u = m / (sqrt(v) + eps) + wd p                                  (eps inside the sqrt on request)
//   per parameter tensor: trust = ||p|| / ||u|| clamped to [min_coeff, max_coeff], or 1 when
//   either norm is 0 (then not clamped)
//   p -= step_size trust u,  step_size = lr sqrt(1 - b2^t) / (1 - b1^t) (lr without bias_correction)
// The norms are over whole tensors: on ZeRO partitions each rank sums its slices and the sums are
// added over the ranks (OptimizerPiece::sum_over_ranks), so the update equals one rank's.
#pragma once
#include <memory>

#include "optim/optimizer.h"

namespace zt {

std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config);

// FusedLamb's trust ratio from a tensor's squared norms.
double lamb_trust_ratio(double param_squares, double update_squares, double min_coeff, double max_coeff);

}  // namespace zt
