// SGD on the optimizer seam: the backend's sgd op over the piece.
#include "optim/sgd.h"

#include "core/error.h"

namespace zt {

namespace {

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& config) : config_(config) {
    // torch.optim.SGD's checks.
    ZT_CHECK(config.momentum >= 0.0, "optimizer SGD: momentum ", config.momentum, " must be >= 0");
    ZT_CHECK(config.weight_decay >= 0.0, "optimizer SGD: weight_decay ", config.weight_decay, " must be >= 0");
    ZT_CHECK(!config.nesterov || (config.momentum > 0.0 && config.dampening == 0.0),
             "optimizer SGD: nesterov momentum needs momentum > 0 and dampening 0 (momentum ", config.momentum,
             ", dampening ", config.dampening, "), as in torch.optim.SGD");
  }
  std::string name() const override { return "sgd"; }
  std::vector<std::string> state_names() const override {
    if (config_.momentum == 0.0) return {};
    return {"momentum_buffer"};
  }
  double flops_per_element() const override { return config_.momentum == 0.0 ? 3.0 : 7.0; }
  bool updates_elementwise() const override { return true; }

  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    SgdParams params;
    params.lr = step.lr;
    params.momentum = config_.momentum;
    params.dampening = config_.dampening;
    params.weight_decay = piece.decay ? config_.weight_decay : 0.0;
    params.nesterov = config_.nesterov;
    params.first_step = step.update_number == 1;  // torch: the buffer does not exist before the first update
    const Tensor momentum_buffer = piece.state.empty() ? Tensor() : piece.state[0];
    backend.optimizer_kernels().sgd(piece.param, piece.grad, momentum_buffer, params);
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config) { return std::make_unique<Sgd>(config); }

}  // namespace zt
