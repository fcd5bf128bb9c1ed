// AdamW on the optimizer seam: the backend's fused adamw op over the piece.
#include "optim/adamw.h"

#include "core/error.h"

namespace zt {

namespace {

class AdamW final : public Optimizer {
 public:
  explicit AdamW(const OptimizerConfig& config) : config_(config) {
    // DeepSpeed "Adam" with adam_w_mode false is L2-regularised Adam: the same update only
    // without weight decay (ds_config accepts it then; a later --weight-decay must not sneak in).
    ZT_CHECK(config.adam_w_mode || config.weight_decay == 0.0,
             "Adam with L2 regularisation (adam_w_mode false and weight_decay ", config.weight_decay,
             ") is not supported: use AdamW (adam_w_mode true) or weight_decay 0");
  }
  std::string name() const override { return "adamw"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  double flops_per_element() const override { return 14.0; }
  bool updates_elementwise() const override { return true; }

  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    AdamWParams params;
    params.lr = step.lr;
    params.beta1 = config_.beta1;
    params.beta2 = config_.beta2;
    params.eps = config_.eps;
    params.weight_decay = piece.decay ? config_.weight_decay : 0.0;
    params.step = step.update_number;
    OptimizerKernels& kernels = backend.optimizer_kernels();
    if (kernels.fuses_adamw_passes())
      kernels.adamw_fused(piece.param, piece.grad, piece.grad_scale, piece.state[0], piece.state[1], params,
                          piece.param_out);
    else
      kernels.adamw(piece.param, piece.grad, piece.state[0], piece.state[1], params);
  }

  bool fuses_offload_passes(Backend& backend) const override {
    return backend.optimizer_kernels().fuses_adamw_passes();
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config) { return std::make_unique<AdamW>(config); }

}  // namespace zt
