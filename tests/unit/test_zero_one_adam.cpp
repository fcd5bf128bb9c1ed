// 0/1 Adam's schedules (optim/zero_one_adam.h) against a literal transcription of DeepSpeed's
// loop in zoadam.py: after the initialising call (s = 1) var_interval = 1, var_counter = 0; at
// each step s of the variance phase, s % var_interval == 0 updates the variance, counts, and
// after var_update_scaler counts the interval doubles; every local step counts, and after
// local_step_scaler counts local_step_interval = min(local_step_clipper, 2 x). zerotune's update t
// is DeepSpeed's step t + 1.
#include <boost/test/unit_test.hpp>

#include "optim/optimizer.h"
#include "optim/zero_one_adam.h"

BOOST_AUTO_TEST_SUITE(zero_one_adam)

BOOST_AUTO_TEST_CASE(schedules_match_deepspeed) {
  for (const auto& [scaler, freeze, local_scaler, clipper] :
       {std::tuple{16, 400, 5, 16}, std::tuple{3, 60, 2, 10}, std::tuple{1, 30, 1, 1}, std::tuple{2, 0, 3, 4}}) {
    zt::OptimizerConfig config;
    config.type = "zerooneadam";
    config.var_update_scaler = scaler;
    config.var_freeze_step = freeze;
    config.local_step_scaler = local_scaler;
    config.local_step_clipper = clipper;
    const auto optimizer = zt::make_optimizer(config);
    int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
    int variance_steps = 0, syncs = 0;
    for (int64_t s = 2; s <= freeze + 200; ++s) {
      const int64_t t = s - 1;
      const bool frozen = s > freeze + 1;
      BOOST_TEST_CONTEXT("scaler " << scaler << " freeze " << freeze << " s " << s) {
        BOOST_TEST(optimizer->local_step(t).has_value() == frozen);
        if (!frozen) {
          const bool variance = s % var_interval == 0;
          variance_steps += variance;
          BOOST_TEST(zt::zero_one_adam_variance_update(config, t) == variance);
          BOOST_TEST(optimizer->momentum_exchange(t).has_value() == !variance);  // the compressed gradient
          if (variance && ++var_counter == scaler) {
            var_counter = 0;
            var_interval *= 2;
          }
        } else {
          const bool sync = s % local_interval == 0;
          syncs += sync;
          BOOST_TEST(optimizer->local_step(t)->synchronise == sync);
          BOOST_TEST(optimizer->local_step(t)->first == (s == freeze + 2));
          BOOST_TEST(!optimizer->momentum_exchange(t).has_value());
          if (++local_counter == local_scaler) {
            local_counter = 0;
            local_interval = std::min<int64_t>(clipper, local_interval * 2);
          }
        }
      }
    }
    BOOST_TEST((variance_steps > 0) == (freeze > 0));  // var_freeze_step 0: local steps from the first update
    BOOST_TEST(syncs > 0);
  }
}

BOOST_AUTO_TEST_SUITE_END()
