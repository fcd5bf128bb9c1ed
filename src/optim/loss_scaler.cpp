// DynamicLossScaler (see loss_scaler.h), following DeepSpeed's DynamicLossScaler.update_scale
// line by line (deepspeed/runtime/fp16/loss_scaler.py).
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.h"

namespace zt {

nlohmann::json LossScalerState::to_json() const {
  return {{"cur_scale", cur_scale},
          {"cur_iter", cur_iter},
          {"last_overflow_iter", last_overflow_iter},
          {"cur_hysteresis", cur_hysteresis}};
}

LossScalerState LossScalerState::from_json(const nlohmann::json& json, const std::string& where) {
  ZT_CHECK(json.is_object(), where, ": the loss scaler state is not a JSON object");
  LossScalerState state;
  auto take = [&](const char* key, auto& target) {
    const auto found = json.find(key);
    ZT_CHECK(found != json.end(), where, ": loss scaler state: key '", key, "' is missing");
    ZT_CHECK(found->is_number(), where, ": loss scaler state: key '", key, "' = ", found->dump(), " is not a number");
    using Target = std::remove_reference_t<decltype(target)>;
    if constexpr (std::is_integral_v<Target>)
      ZT_CHECK(found->is_number_integer(), where, ": loss scaler state: key '", key, "' = ", found->dump(),
               " is not an integer");
    target = found->get<Target>();
  };
  take("cur_scale", state.cur_scale);
  take("cur_iter", state.cur_iter);
  take("last_overflow_iter", state.last_overflow_iter);
  take("cur_hysteresis", state.cur_hysteresis);
  return state;
}

DynamicLossScaler::DynamicLossScaler(const LossScalerConfig& config, const LossScalerOptions& options)
    : config_(config), options_(options) {
  ZT_CHECK(config.loss_scale >= 0.0 && std::isfinite(config.loss_scale), "fp16.loss_scale = ", config.loss_scale,
           ": must be 0 (dynamic) or a positive static scale");
  dynamic_ = config.loss_scale == 0.0;
  if (!dynamic_) {
    state_.cur_scale = config.loss_scale;
    return;
  }
  ZT_CHECK(config.initial_scale_power >= 0 && config.initial_scale_power <= 64, "fp16.initial_scale_power = ",
           config.initial_scale_power, ": must be in [0, 64]");
  ZT_CHECK(config.loss_scale_window >= 1, "fp16.loss_scale_window = ", config.loss_scale_window, ": must be >= 1");
  ZT_CHECK(config.hysteresis >= 1, "fp16.hysteresis = ", config.hysteresis, ": must be >= 1");
  ZT_CHECK(config.min_loss_scale >= 0.0 && std::isfinite(config.min_loss_scale), "fp16.min_loss_scale = ",
           config.min_loss_scale, ": must be a finite number >= 0");
  ZT_CHECK(options.scale_factor > 1.0, "loss scaler: scale_factor = ", options.scale_factor, ": must be > 1");
  state_.cur_scale = std::ldexp(1.0, config.initial_scale_power);
  state_.cur_hysteresis = config.hysteresis;  // DeepSpeed: cur_hysteresis = delayed_shift
}

bool DynamicLossScaler::update(bool overflow) {
  if (!dynamic_) return overflow;  // DeepSpeed's LossScaler.update_scale does nothing
  const int delayed_shift = config_.hysteresis;
  if (overflow) {
    if (delayed_shift == 1 || state_.cur_hysteresis == 1) {
      if (state_.cur_scale == config_.min_loss_scale && options_.raise_error_at_min_scale)
        fail("fp16 loss scale: the gradients overflow at step ", state_.cur_iter, " with the loss scale already at ",
             "fp16.min_loss_scale = ", config_.min_loss_scale,
             ": it cannot decrease any further (DeepSpeed ends the run here too); lower fp16.min_loss_scale, "
             "lower the learning rate, or train in bf16");
      state_.cur_scale = std::max(state_.cur_scale / options_.scale_factor, config_.min_loss_scale);
    } else {
      state_.cur_hysteresis -= 1;
    }
    state_.last_overflow_iter = state_.cur_iter;
  } else {
    if (options_.consecutive_hysteresis) state_.cur_hysteresis = delayed_shift;
    if ((state_.cur_iter - state_.last_overflow_iter) % config_.loss_scale_window == 0) {
      if (!options_.consecutive_hysteresis) state_.cur_hysteresis = delayed_shift;
      state_.cur_scale *= options_.scale_factor;
    }
  }
  state_.cur_iter += 1;
  return overflow;
}

void DynamicLossScaler::load_state(const LossScalerState& state, const std::string& where) {
  ZT_CHECK(std::isfinite(state.cur_scale) && state.cur_scale > 0.0, where, ": loss scaler cur_scale = ",
           state.cur_scale, ": must be a positive finite number");
  ZT_CHECK(state.cur_iter >= 0, where, ": loss scaler cur_iter = ", state.cur_iter, ": must be >= 0");
  ZT_CHECK(state.last_overflow_iter >= -1 && state.last_overflow_iter < state.cur_iter,
           where, ": loss scaler last_overflow_iter = ", state.last_overflow_iter, ": must be in [-1, cur_iter = ",
           state.cur_iter, ")");
  ZT_CHECK(state.cur_hysteresis >= 1, where, ": loss scaler cur_hysteresis = ", state.cur_hysteresis,
           ": must be >= 1");
  state_ = state;
  if (!dynamic_) state_.cur_scale = config_.loss_scale;  // a static scale is the configuration's choice
}

}  // namespace zt
