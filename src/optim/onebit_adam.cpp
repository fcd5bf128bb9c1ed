// 1-bit Adam on the optimizer seam: LAMB's per-element pass computes Adam's raw-moment direction
// (with b1 = 0 and b2 = 1 it takes the exchanged momentum and leaves v frozen), then p -= lr u.
#include "optim/onebit_adam.h"

#include "core/error.h"
#include "optim/lamb.h"

namespace zt {

namespace {

class OneBitAdam final : public Optimizer {
 public:
  explicit OneBitAdam(const OptimizerConfig& config) : config_(config) {
    ZT_CHECK(config.freeze_step >= 0, "optimizer OneBitAdam: freeze_step ", config.freeze_step, " is negative");
    ZT_CHECK(config.comm_backend_name == "nccl" || config.comm_backend_name == "mpi",
             "optimizer OneBitAdam: comm_backend_name \"", config.comm_backend_name, "\" is not \"nccl\" or \"mpi\"");
  }
  std::string name() const override { return "onebitadam"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  double flops_per_element() const override { return 12.0; }
  bool exchanges_momentum() const override { return true; }

  std::optional<MomentumExchange> momentum_exchange(int64_t update_number) const override {
    if (update_number <= config_.freeze_step) return std::nullopt;
    return MomentumExchange{0, static_cast<float>(config_.beta1), static_cast<float>(1.0 - config_.beta1)};
  }

  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    const bool compressed = momentum_exchange(step.update_number).has_value();
    // compressed: m = the exchanged momentum (piece.grad), v frozen. m / (sqrt(v) + eps) + wd p
    // overwrites the gradient.
    const Tensor direction = lamb_direction_of(backend, piece, compressed ? 0.0 : config_.beta1,
                                               compressed ? 1.0 : config_.beta2, config_.eps,
                                               piece.decay ? config_.weight_decay : 0.0);
    backend.accumulate(piece.param, direction, static_cast<float>(-step.lr));
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_onebit_adam(const OptimizerConfig& config) {
  return std::make_unique<OneBitAdam>(config);
}

}  // namespace zt
