// Unit tests of DynamicLossScaler (optim/loss_scaler.h): scripted overflow sequences whose
// expected scales are worked out by hand from DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py): window counting from last_overflow_iter,
// hysteresis (delayed shift) with and without consecutive_hysteresis, the floor at
// min_loss_scale and the error there; a static scale; state round trips and bad values.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "optim/loss_scaler.h"
#include "test_util.h"

namespace {

struct Step {
  bool overflow;
  double scale_after;  // cur_scale after update(overflow)
};

// Runs the sequence, checking the returned skip flag and the scale after every step.
void run_script(zt::DynamicLossScaler& scaler, const std::vector<Step>& script, const std::string& what) {
  for (size_t i = 0; i < script.size(); ++i) {
    const bool skipped = scaler.update(script[i].overflow);
    BOOST_TEST(skipped == script[i].overflow, what << " iteration " << i << ": skip flag");
    BOOST_TEST(scaler.scale() == script[i].scale_after, what << " iteration " << i << ": scale " << scaler.scale()
                                                              << ", expected " << script[i].scale_after);
    BOOST_TEST(scaler.state().cur_iter == static_cast<int64_t>(i) + 1, what << ": every step counts");
  }
}

zt::LossScalerConfig small_config() {
  zt::LossScalerConfig config;
  config.initial_scale_power = 4;  // 16
  config.loss_scale_window = 3;
  config.hysteresis = 2;
  config.min_loss_scale = 2.0;
  return config;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(loss_scaler)

BOOST_AUTO_TEST_CASE(hysteresis_two_window_three_down_to_the_minimum) {
  // Scale 16, window 3, hysteresis 2, min 2. At iteration i (cur_iter), DeepSpeed's rule:
  //   clean step: doubles when (i - last_overflow_iter) % 3 == 0, refilling hysteresis to 2;
  //   overflow:   hysteresis 2 -> 1 and keep the scale, or with hysteresis 1 halve (floor 2).
  zt::DynamicLossScaler scaler(small_config());
  BOOST_TEST(scaler.dynamic());
  BOOST_TEST(scaler.scale() == 16.0f);
  const std::vector<Step> script = {
      {false, 16},  // i0: (0 - -1) = 1
      {false, 16},  // i1: 2
      {false, 32},  // i2: 3 % 3 == 0 -> double, hysteresis 2
      {true, 32},   // i3: hysteresis 2 -> 1, scale kept; last = 3
      {true, 16},   // i4: hysteresis 1 -> halve; last = 4
      {false, 16},  // i5: 1
      {false, 16},  // i6: 2
      {false, 32},  // i7: 3 -> double, hysteresis refilled to 2
      {true, 32},   // i8: hysteresis 2 -> 1; last = 8
      {false, 32},  // i9: 1 (no refill: consecutive_hysteresis is off)
      {true, 16},   // i10: hysteresis still 1 -> halve; last = 10
      {true, 8},    // i11
      {true, 4},    // i12
      {true, 2},    // i13: reaches min_loss_scale
      {false, 2},   // i14: 1
      {false, 2},   // i15: 2
      {false, 4},   // i16: 3 -> double, hysteresis 2
      {true, 4},    // i17: hysteresis 2 -> 1
      {true, 2},    // i18: halve to the minimum
  };
  run_script(scaler, script, "hysteresis 2");
  BOOST_TEST(scaler.state().last_overflow_iter == 18);
  BOOST_TEST(scaler.state().cur_hysteresis == 1);
  // i19: overflow with the scale at min_loss_scale: DeepSpeed raises.
  zt::test::check_error_mentions([&] { scaler.update(true); }, {"fp16.min_loss_scale = 2", "cannot decrease"});
}

BOOST_AUTO_TEST_CASE(without_raising_the_scale_stays_at_the_floor) {
  zt::LossScalerOptions options;
  options.raise_error_at_min_scale = false;
  zt::LossScalerConfig config = small_config();
  config.hysteresis = 1;  // delayed_shift 1: every overflow halves
  zt::DynamicLossScaler scaler(config, options);
  run_script(scaler, {{true, 8}, {true, 4}, {true, 2}, {true, 2}, {true, 2}, {false, 2}, {false, 2}, {false, 4}},
             "no raise");
}

BOOST_AUTO_TEST_CASE(consecutive_hysteresis_refills_on_every_clean_step) {
  zt::LossScalerOptions options;
  options.consecutive_hysteresis = true;
  zt::DynamicLossScaler scaler(small_config(), options);
  run_script(scaler,
             {
                 {true, 16},   // i0: hysteresis 2 -> 1
                 {false, 16},  // i1: refilled to 2; (1 - 0) % 3 != 0
                 {true, 16},   // i2: 2 -> 1 again: the scale never drops with isolated overflows
                 {false, 16},  // i3: refill; 1
                 {false, 16},  // i4: 2
                 {false, 32},  // i5: 3 -> double
                 {true, 32},   // i6: 2 -> 1
                 {true, 16},   // i7: 1 -> halve
             },
             "consecutive hysteresis");
}

BOOST_AUTO_TEST_CASE(min_scale_that_is_not_a_power_of_two_is_a_floor) {
  zt::LossScalerConfig config = small_config();
  config.hysteresis = 1;
  config.min_loss_scale = 3.0;
  zt::DynamicLossScaler scaler(config);
  run_script(scaler, {{true, 8}, {true, 4}, {true, 3}}, "min 3");  // max(4 / 2, 3) = 3
  zt::test::check_error([&] { scaler.update(true); }, "fp16.min_loss_scale = 3");
}

BOOST_AUTO_TEST_CASE(deepspeed_defaults_double_after_a_full_window) {
  // initial_scale_power 16, window 1000, hysteresis 2: the first doubling is at iteration 999
  // ((999 - -1) % 1000 == 0), i.e. after 1000 clean steps; after an overflow at iteration k the
  // next one is at k + 1000.
  zt::DynamicLossScaler scaler(zt::LossScalerConfig{});
  BOOST_TEST(scaler.scale() == 65536.0f);
  for (int i = 0; i < 999; ++i) scaler.update(false);
  BOOST_TEST(scaler.scale() == 65536.0f);
  scaler.update(false);  // iteration 999
  BOOST_TEST(scaler.scale() == 131072.0f);
  scaler.update(true);  // iteration 1000: hysteresis 2 -> 1, scale kept
  BOOST_TEST(scaler.scale() == 131072.0f);
  scaler.update(true);  // iteration 1001: halved
  BOOST_TEST(scaler.scale() == 65536.0f);
  for (int i = 0; i < 999; ++i) scaler.update(false);  // iterations 1002 .. 2000
  BOOST_TEST(scaler.scale() == 65536.0f);
  scaler.update(false);  // iteration 2001 = 1001 + 1000
  BOOST_TEST(scaler.scale() == 131072.0f);
}

BOOST_AUTO_TEST_CASE(static_scale_never_moves_but_overflow_still_skips) {
  zt::LossScalerConfig config;
  config.loss_scale = 128.0;
  zt::DynamicLossScaler scaler(config);
  BOOST_TEST(!scaler.dynamic());
  BOOST_TEST(scaler.scale() == 128.0f);
  BOOST_TEST(scaler.update(true));
  BOOST_TEST(!scaler.update(false));
  for (int i = 0; i < 10; ++i) scaler.update(i % 2 == 0);
  BOOST_TEST(scaler.scale() == 128.0f);
}

BOOST_AUTO_TEST_CASE(state_round_trips_and_resumes_exactly) {
  const std::vector<bool> overflows = {false, true, false, false, true, true, false, false, false, false, true};
  zt::DynamicLossScaler reference(small_config());
  zt::DynamicLossScaler first_half(small_config());
  for (size_t i = 0; i < overflows.size(); ++i) {
    reference.update(overflows[i]);
    if (i < 5) first_half.update(overflows[i]);
  }
  // Checkpoint after 5 steps, through JSON, into a fresh scaler; it must end where the
  // uninterrupted one does.
  const nlohmann::json saved = first_half.state().to_json();
  zt::DynamicLossScaler resumed(small_config());
  resumed.load_state(zt::LossScalerState::from_json(nlohmann::json::parse(saved.dump()), "manifest.json"),
                     "manifest.json");
  for (size_t i = 5; i < overflows.size(); ++i) resumed.update(overflows[i]);
  BOOST_TEST(resumed.state().cur_scale == reference.state().cur_scale);
  BOOST_TEST(resumed.state().cur_iter == reference.state().cur_iter);
  BOOST_TEST(resumed.state().last_overflow_iter == reference.state().last_overflow_iter);
  BOOST_TEST(resumed.state().cur_hysteresis == reference.state().cur_hysteresis);
  BOOST_TEST(saved.at("cur_iter") == 5);
  BOOST_TEST(saved.at("last_overflow_iter") == 4);
}

BOOST_AUTO_TEST_CASE(bad_configurations_and_states_are_errors) {
  using zt::test::check_error;
  auto make = [](auto edit) {
    zt::LossScalerConfig config;
    edit(config);
    zt::DynamicLossScaler scaler(config);
  };
  check_error([&] { make([](zt::LossScalerConfig& c) { c.loss_scale = -1.0; }); }, "fp16.loss_scale = -1");
  check_error([&] { make([](zt::LossScalerConfig& c) { c.loss_scale_window = 0; }); }, "fp16.loss_scale_window = 0");
  check_error([&] { make([](zt::LossScalerConfig& c) { c.hysteresis = 0; }); }, "fp16.hysteresis = 0");
  check_error([&] { make([](zt::LossScalerConfig& c) { c.initial_scale_power = -3; }); },
              "fp16.initial_scale_power = -3");
  check_error([&] { make([](zt::LossScalerConfig& c) { c.min_loss_scale = -1.0; }); }, "fp16.min_loss_scale = -1");

  zt::DynamicLossScaler scaler(small_config());
  zt::LossScalerState state;
  state.cur_scale = 0.0;
  check_error([&] { scaler.load_state(state, "ck/manifest.json"); }, "ck/manifest.json: loss scaler cur_scale = 0");
  state = zt::LossScalerState{};
  state.cur_iter = 3;
  state.last_overflow_iter = 3;
  check_error([&] { scaler.load_state(state, "ck/manifest.json"); }, "last_overflow_iter = 3");
  check_error([&] { zt::LossScalerState::from_json({{"cur_scale", 1.0}}, "m.json"); }, "key 'cur_iter' is missing");
  check_error([&] {
    zt::LossScalerState::from_json({{"cur_scale", 1.0}, {"cur_iter", 1.5}, {"last_overflow_iter", -1}, {"cur_hysteresis", 1}},
                                   "m.json");
  }, "key 'cur_iter' = 1.5 is not an integer");
}

BOOST_AUTO_TEST_SUITE_END()
