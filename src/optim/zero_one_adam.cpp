// 0/1 Adam on the optimizer seam (see zero_one_adam.h): LAMB's per-element pass computes Adam's
// raw-moment direction (b2 = 1 leaves v frozen), then p -= lr u; the local phase runs it on each
// rank's replica, where the accumulator is the third state buffer.
#include "optim/zero_one_adam.h"

#include <algorithm>

#include "core/error.h"
#include "optim/lamb.h"

namespace zt {

namespace {

// DeepSpeed's step number of update t.
int64_t deepspeed_step(int64_t update_number) { return update_number + 1; }

bool in_local_phase(const OptimizerConfig& config, int64_t update_number) {
  return deepspeed_step(update_number) > config.var_freeze_step + 1;
}

class ZeroOneAdam final : public Optimizer {
 public:
  explicit ZeroOneAdam(const OptimizerConfig& config) : config_(config) {
    ZT_CHECK(config.var_freeze_step >= 0, "optimizer ZeroOneAdam: var_freeze_step ", config.var_freeze_step, " is negative");
    ZT_CHECK(config.var_update_scaler >= 1, "optimizer ZeroOneAdam: var_update_scaler ", config.var_update_scaler,
             " must be >= 1");
    ZT_CHECK(config.local_step_scaler >= 1, "optimizer ZeroOneAdam: local_step_scaler ", config.local_step_scaler,
             " must be >= 1");
    ZT_CHECK(config.local_step_clipper >= 1, "optimizer ZeroOneAdam: local_step_clipper ", config.local_step_clipper,
             " must be >= 1");
    ZT_CHECK(config.comm_backend_name == "nccl" || config.comm_backend_name == "mpi",
             "optimizer ZeroOneAdam: comm_backend_name \"", config.comm_backend_name, "\" is not \"nccl\" or \"mpi\"");
  }
  std::string name() const override { return "zerooneadam"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> local_state_names() const override { return {"momentum_accumulator"}; }
  double flops_per_element() const override { return 14.0; }
  bool exchanges_momentum() const override { return true; }

  // The variance phase's steps without a variance update average the gradient alone.
  std::optional<MomentumExchange> momentum_exchange(int64_t update_number) const override {
    if (in_local_phase(config_, update_number) || zero_one_adam_variance_update(config_, update_number))
      return std::nullopt;
    return MomentumExchange{0, 0.0f, 1.0f};
  }

  std::optional<LocalStep> local_step(int64_t update_number) const override {
    if (!in_local_phase(config_, update_number)) return std::nullopt;
    LocalStep step;
    step.first = !in_local_phase(config_, update_number - 1);
    step.synchronise = deepspeed_step(update_number) % zero_one_adam_local_interval(config_, update_number) == 0;
    return step;
  }

  // Variance step: v and m from the reduced gradient; compressed step: m from the average, v
  // kept; local step (the replica, state {m, v, acc}): m from the local gradient, v kept, and the
  // step also goes into the accumulator.
  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    const bool variance = !in_local_phase(config_, step.update_number) &&
                          zero_one_adam_variance_update(config_, step.update_number);
    // m / (sqrt(v) + eps) + wd p overwrites the gradient; v moves only at a variance update.
    const Tensor direction = lamb_direction_of(backend, piece, config_.beta1, variance ? config_.beta2 : 1.0,
                                               config_.eps, piece.decay ? config_.weight_decay : 0.0);
    backend.accumulate(piece.param, direction, static_cast<float>(-step.lr));
    if (piece.state.size() > 2) backend.accumulate(piece.state[2], direction, static_cast<float>(-step.lr));
  }

  // p -= acc (the parameters of the last synchronisation); out = acc (sqrt(v) + eps).
  void synchronisation_input(Backend& backend, OptimizerPiece& piece, Tensor out) const override {
    Tensor accumulator = piece.state[2];
    backend.accumulate(piece.param, accumulator, -1.0f);
    backend.copy(out, accumulator);
    backend.optimizer_kernels().adam_denominator_scale(out, piece.state[1], static_cast<float>(config_.eps), false);
  }

  // m = -A / lrs;  p += A / (sqrt(v) + eps);  acc = 0.  `average` is used up.
  void synchronise(Backend& backend, OptimizerPiece& piece, Tensor average, const OptimizerStep& step) const override {
    ZT_CHECK(step.local_lr_sum > 0.0, "optimizer ZeroOneAdam: the learning rates since the last synchronisation sum to ",
             step.local_lr_sum, " (a zero learning rate leaves the momentum undefined)");
    backend.copy(piece.state[0], average);
    backend.scale(piece.state[0], static_cast<float>(-1.0 / step.local_lr_sum));
    backend.optimizer_kernels().adam_denominator_scale(average, piece.state[1], static_cast<float>(config_.eps),
                                                     true);
    backend.accumulate(piece.param, average, 1.0f);
    backend.fill(piece.state[2], 0.0f);
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

// DeepSpeed's variance schedule: after its first call (s = 1) the interval is 1; every step s with
// s % interval == 0 updates the variance and counts, and after var_update_scaler counted steps
// the interval doubles. Jumps over whole intervals, so it costs O(log s).
bool zero_one_adam_variance_update(const OptimizerConfig& config, int64_t update_number) {
  const int64_t target = deepspeed_step(update_number);
  int64_t last = 1, interval = 1;  // the last counted step (the first call), the current interval
  for (;;) {
    const int64_t first = (last / interval + 1) * interval;  // the next multiple of the interval
    if (first > target) return false;
    if ((target - first) / interval < config.var_update_scaler) return (target - first) % interval == 0;
    last = first + (config.var_update_scaler - 1) * interval;  // < target: no overflow
    interval *= 2;
  }
}

// DeepSpeed's local-step interval at update t of the local phase: the k-th local step (k = 1 at
// s = var_freeze_step + 2) has min(local_step_clipper, 2^floor((k - 1) / local_step_scaler)).
int64_t zero_one_adam_local_interval(const OptimizerConfig& config, int64_t update_number) {
  const int64_t k = deepspeed_step(update_number) - (config.var_freeze_step + 1);
  int64_t interval = 1;
  for (int64_t doublings = (k - 1) / config.local_step_scaler; doublings > 0 && interval < config.local_step_clipper;
       --doublings)
    interval *= 2;
  return std::min(interval, config.local_step_clipper);
}

std::unique_ptr<Optimizer> make_zero_one_adam(const OptimizerConfig& config) {
  return std::make_unique<ZeroOneAdam>(config);
}

}  // namespace zt
