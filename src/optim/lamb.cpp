// LAMB on the optimizer seam: the backend's per-element pass, per-tensor norms summed over the
// ranks, then p += -(step_size trust) u per tensor.
#include "optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zt {

double lamb_trust_ratio(double param_squares, double update_squares, double min_coeff, double max_coeff) {
  const double param_norm = std::sqrt(param_squares), update_norm = std::sqrt(update_squares);
  if (param_norm == 0.0 || update_norm == 0.0) return 1.0;  // FusedLamb: 1, and not clamped
  return std::clamp(param_norm / update_norm, min_coeff, max_coeff);
}

namespace {

class Lamb final : public Optimizer {
 public:
  explicit Lamb(const OptimizerConfig& config) : config_(config) {
    ZT_CHECK(config.min_coeff > 0.0 && config.min_coeff <= config.max_coeff, "optimizer Lamb: min_coeff ",
             config.min_coeff, " and max_coeff ", config.max_coeff, " must satisfy 0 < min_coeff <= max_coeff");
  }
  std::string name() const override { return "lamb"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  bool needs_tensor_slices() const override { return true; }
  double flops_per_element() const override { return 16.0; }

  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    // u overwrites the gradient, which is not needed after this pass
    const Tensor update = lamb_direction_of(backend, piece, config_.beta1, config_.beta2, config_.eps,
                                            piece.decay ? config_.weight_decay : 0.0, config_.eps_inside_sqrt);
    // Squared norms of every tensor's slice: [2 K] = (||p||^2, ||u||^2) per tensor, then summed over the ranks.
    std::vector<double> squares(2 * piece.tensors.size(), 0.0);
    for (size_t k = 0; k < piece.tensors.size(); ++k) {
      const TensorSlice& slice = piece.tensors[k];
      if (!slice.numel) continue;
      squares[2 * k] = backend.sum_squares(piece.param.rows(slice.begin, slice.numel));
      squares[2 * k + 1] = backend.sum_squares(update.rows(slice.begin, slice.numel));
    }
    piece.sum_over_ranks(squares);
    const double t = static_cast<double>(step.update_number);
    const double step_size = config_.bias_correction
                                 ? step.lr * std::sqrt(1.0 - std::pow(config_.beta2, t)) / (1.0 - std::pow(config_.beta1, t))
                                 : step.lr;
    for (size_t k = 0; k < piece.tensors.size(); ++k) {
      const TensorSlice& slice = piece.tensors[k];
      if (!slice.numel) continue;
      const double trust = lamb_trust_ratio(squares[2 * k], squares[2 * k + 1], config_.min_coeff, config_.max_coeff);
      backend.accumulate(piece.param.rows(slice.begin, slice.numel), update.rows(slice.begin, slice.numel),
                         static_cast<float>(-step_size * trust));
    }
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config) { return std::make_unique<Lamb>(config); }

Tensor lamb_direction_of(Backend& backend, OptimizerPiece& piece, double beta1, double beta2, double eps,
                         double weight_decay, bool eps_inside_sqrt) {
  LambParams params;
  params.beta1 = beta1;
  params.beta2 = beta2;
  params.eps = eps;
  params.weight_decay = weight_decay;
  params.eps_inside_sqrt = eps_inside_sqrt;
  backend.optimizer_kernels().lamb_direction(piece.grad, piece.param, piece.grad, piece.state[0], piece.state[1],
                                             params);
  return piece.grad;
}

}  // namespace zt
