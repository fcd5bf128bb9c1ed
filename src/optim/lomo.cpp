// LOMO on the optimizer seam: value clipping, then the backend's sgd op (no momentum) over the
// unit's piece: p - lr (g + wd p) = p (1 - lr wd) - lr g, Lomo's decoupled decay.
#include "optim/lomo.h"

#include "core/error.h"

namespace zt {

void clamp_gradient_values(Backend& backend, Tensor grad, double clip_grad_value, const OptimizerStep& step) {
  if (!(clip_grad_value > 0.0)) return;
  const float bound = static_cast<float>(clip_grad_value) / step.clip_coefficient;
  backend.clamp(grad, -bound, bound);
}

namespace {

class Lomo final : public Optimizer {
 public:
  explicit Lomo(const OptimizerConfig& config) : config_(config) {
    ZT_CHECK(config.weight_decay >= 0.0, "optimizer LOMO: weight_decay ", config.weight_decay, " must be >= 0");
    ZT_CHECK(config.clip_grad_value >= 0.0, "optimizer LOMO: clip_grad_value ", config.clip_grad_value,
             " must be >= 0 (0: off)");
  }
  std::string name() const override { return "lomo"; }
  std::vector<std::string> state_names() const override { return {}; }
  bool fuses_into_backward() const override { return true; }
  double flops_per_element() const override { return config_.clip_grad_value > 0.0 ? 5.0 : 3.0; }

  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    clamp_gradient_values(backend, piece.grad, config_.clip_grad_value, step);
    SgdParams params;
    params.lr = step.lr;
    params.weight_decay = piece.decay ? config_.weight_decay : 0.0;
    backend.optimizer_kernels().sgd(piece.param, piece.grad, Tensor(), params);
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lomo(const OptimizerConfig& config) { return std::make_unique<Lomo>(config); }

}  // namespace zt
