// DynamicLossScaler: fp16 loss scaling with DeepSpeed's semantics
// (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale, and LossScaler for a
// static scale), and its state for checkpoints.
//
// Per optimizer step: the loss is multiplied by scale() before backward; after the gradient
// overflow check (any inf/NaN on any rank), update(overflow) says whether the step must be
// skipped and moves the scale:
//   overflow:    if hysteresis == 1 or cur_hysteresis == 1: the scale halves (not below
//                min_loss_scale; already at it: an error unless raise_error_at_min_scale is off),
//                else cur_hysteresis -= 1 (the scale is kept: the "delayed shift");
//                last_overflow_iter = cur_iter.
//   no overflow: if (cur_iter - last_overflow_iter) % loss_scale_window == 0: the scale doubles
//                and cur_hysteresis is refilled (with consecutive_hysteresis it is refilled on
//                every clean step instead).
//   then cur_iter += 1 (every step counts, skipped or not).
// The initial scale is 2^initial_scale_power; a static scale (loss_scale > 0) never changes but
// an overflowing step is still skipped, as DeepSpeed's ZeRO optimizers do. DeepSpeed makes a
// scaler only for fp16: with bf16/fp32 compute the trainer uses scale 1 and no overflow check.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "optim/schedule_config.h"

namespace zt {

// What a checkpoint stores to resume the scaler exactly (DeepSpeed's attribute names).
struct LossScalerState {
  double cur_scale = 1.0;
  int64_t cur_iter = 0;             // update() calls so far
  int64_t last_overflow_iter = -1;  // cur_iter of the last overflow, -1 before any
  int cur_hysteresis = 1;           // overflows still tolerated before the scale drops

  nlohmann::json to_json() const;
  // Reads to_json's object; `where` names its origin (e.g. the manifest's path) in messages.
  static LossScalerState from_json(const nlohmann::json& json, const std::string& where);
};

// The DynamicLossScaler arguments that DeepSpeed's "fp16" section does not expose through
// LossScalerConfig (defaults as DeepSpeed's ZeRO optimizers construct it).
struct LossScalerOptions {
  bool consecutive_hysteresis = false;   // fp16.consecutive_hysteresis (zerotune's ds_config requires false)
  bool raise_error_at_min_scale = true;  // an overflow at min_loss_scale ends the run
  double scale_factor = 2.0;
};

class DynamicLossScaler {
 public:
  // Validates the configuration (messages name the fp16.* key).
  explicit DynamicLossScaler(const LossScalerConfig& config, const LossScalerOptions& options = {});

  float scale() const { return static_cast<float>(state_.cur_scale); }
  bool dynamic() const { return dynamic_; }
  // Records this step's overflow flag (the same on every rank) and returns true when the
  // optimizer step must be skipped, i.e. when `overflow` is true.
  bool update(bool overflow);

  const LossScalerState& state() const { return state_; }
  // Restores a checkpointed state (checked for consistency; `where` names its origin). With a
  // static scale the configured fp16.loss_scale is kept.
  void load_state(const LossScalerState& state, const std::string& where);

 private:
  LossScalerConfig config_;
  LossScalerOptions options_;
  bool dynamic_ = true;
  LossScalerState state_;
};

}  // namespace zt
