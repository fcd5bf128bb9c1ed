// AdamW over the flat trainable groups of a ParamStore.
#include "optim/adamw_optimizer.h"

#include <cmath>

namespace zt {

namespace {
constexpr ParamGroup kTrainableGroups[] = {ParamGroup::Decay, ParamGroup::NoDecay};
}

AdamWOptimizer::AdamWOptimizer(Backend& backend, ParamStore& store, const OptimizerConfig& config)
    : backend_(backend), store_(store), config_(config) {
  ZT_CHECK(config.adam_w_mode || config.weight_decay == 0.0,
           "Adam with L2 regularisation (adam_w_mode false and weight_decay ", config.weight_decay,
           ") is not supported: use AdamW (adam_w_mode true) or weight_decay 0");
  for (ParamGroup group : kTrainableGroups) {
    const int64_t numel = store.group(group).numel;
    GroupState& state = state_[static_cast<int>(group)];
    state.exp_avg = Buffer(backend, static_cast<size_t>(numel) * sizeof(float));
    state.exp_avg_sq = Buffer(backend, static_cast<size_t>(numel) * sizeof(float));
    if (numel) {
      backend.fill(state.exp_avg.view(DType::F32, {numel}), 0.0f);
      backend.fill(state.exp_avg_sq.view(DType::F32, {numel}), 0.0f);
    }
  }
}

double AdamWOptimizer::gradient_norm() const {
  double squares = 0.0;
  for (ParamGroup group : kTrainableGroups)
    if (store_.group(group).numel) squares += backend_.sum_squares(store_.group_grads(group));
  return std::sqrt(squares);
}

void AdamWOptimizer::step(double lr, float clip_coefficient, int64_t update_number) {
  for (ParamGroup group : kTrainableGroups) {
    const int64_t numel = store_.group(group).numel;
    if (!numel) continue;
    if (clip_coefficient != 1.0f) backend_.scale(store_.group_grads(group), 1.0f / clip_coefficient);
    AdamWParams params;
    params.lr = lr;
    params.beta1 = config_.beta1;
    params.beta2 = config_.beta2;
    params.eps = config_.eps;
    params.weight_decay = group == ParamGroup::Decay ? config_.weight_decay : 0.0;
    params.step = update_number;
    GroupState& state = state_[static_cast<int>(group)];
    backend_.adamw(store_.group_params(group), store_.group_grads(group), state.exp_avg.view(DType::F32, {numel}),
                   state.exp_avg_sq.view(DType::F32, {numel}), params);
  }
}

}  // namespace zt
