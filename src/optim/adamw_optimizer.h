// AdamWOptimizer: fp32 optimizer state (first and second moments) for every trainable group of
// a ParamStore, the global gradient norm, DeepSpeed-style clipping and the AdamW update with
// weight decay only on the decay group (linear and embedding weights; not norms and biases).
#pragma once
#include <cstdint>

#include "backend/buffer.h"
#include "model/param_store.h"
#include "train/train_config.h"

namespace zt {

class AdamWOptimizer {
 public:
  AdamWOptimizer(Backend& backend, ParamStore& store, const OptimizerConfig& config);

  // L2 norm of all trainable gradients (in double).
  double gradient_norm() const;
  // Scales the gradients by 1/clip_coefficient (when it is not 1) and applies one AdamW update
  // at learning rate `lr`; `update_number` is 1 for the first applied update (bias correction).
  void step(double lr, float clip_coefficient, int64_t update_number);

 private:
  struct GroupState {
    Buffer exp_avg, exp_avg_sq;  // fp32 [group numel]
  };
  Backend& backend_;
  ParamStore& store_;
  OptimizerConfig config_;
  GroupState state_[kParamGroups];
};

}  // namespace zt
