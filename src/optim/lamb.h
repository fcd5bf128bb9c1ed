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

// LAMB's direction over a piece, written into piece.grad (which is returned): the moments move
// by beta1 and beta2 (beta1 0: m is the gradient as given; beta2 1: v stays), then
// u = m / (sqrt(v) + eps) + weight_decay p. The compressed Adams (1-bit, 0/1) step p -= lr u.
Tensor lamb_direction_of(Backend& backend, OptimizerPiece& piece, double beta1, double beta2, double eps,
                         double weight_decay, bool eps_inside_sqrt = false);

// FusedLamb's trust ratio from a tensor's squared norms.
double lamb_trust_ratio(double param_squares, double update_squares, double min_coeff, double max_coeff);

}  // namespace zt
