// Tests of the learning-rate schedules (src/optim/lr_schedule) against closed forms written out
// here and against values produced by DeepSpeed's and HF's own Python code; and of DeepSpeed's
// gradient-clipping coefficient (src/optim/grad_clip).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

using zt::SchedulerConfig;
using zt::learning_rate_at;

namespace {

constexpr double kPi = std::numbers::pi;

// Relative agreement (the implementation follows the libraries' operation order, so the
// difference is at most a few ulps of libm's log/cos).
bool close(double a, double b) { return std::fabs(a - b) <= 1e-13 * std::max(std::fabs(a), std::fabs(b)) + 1e-20; }

void check_sequence(const SchedulerConfig& schedule, double optimizer_lr, const std::vector<double>& expected,
                    const std::string& what) {
  for (size_t step = 0; step < expected.size(); ++step) {
    const double lr = learning_rate_at(schedule, optimizer_lr, static_cast<int64_t>(step));
    BOOST_CHECK_MESSAGE(close(lr, expected[step]), what << ": update " << step << " lr " << lr << " expected "
                                                        << expected[step]);
  }
}

using zt::test::check_error;

SchedulerConfig deepspeed(const std::string& type, double min_lr, double max_lr, int64_t warmup, const std::string& warmup_type,
                          int64_t total = 0) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_min_lr = min_lr;
  s.warmup_max_lr = max_lr;
  s.warmup_num_steps = warmup;
  s.warmup_type = warmup_type;
  s.total_num_steps = total;
  return s;
}

SchedulerConfig cosine_ds(int64_t total, int64_t warmup, double min_ratio, double cos_min_ratio,
                          const std::string& warmup_type) {
  SchedulerConfig s;
  s.type = "WarmupCosineLR";
  s.total_num_steps = total;
  s.warmup_num_steps = warmup;
  s.warmup_min_ratio = min_ratio;
  s.cos_min_ratio = cos_min_ratio;
  s.warmup_type = warmup_type;
  return s;
}

SchedulerConfig hf(const std::string& type, int64_t warmup_steps, int64_t total) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_steps = warmup_steps;
  s.total_num_steps = total;
  return s;
}

// ---- Values recorded from the libraries themselves --------------------------------------------
// Printed by tests/oracle/gen_lr_schedule_cases.py, run with /tmp/ztvenv/bin/python (torch 1.13,
// transformers 4.40.2) on DeepSpeed 0.19.8's deepspeed/runtime/lr_schedules.py (the file alone,
// from `pip download deepspeed --no-deps`, its deepspeed.utils.logger stubbed; 0.15.3 and later
// set the first lr in the constructor, later ones also clamp WarmupCosineLR's cosine at its end)
// and on transformers.optimization: a torch.optim.AdamW over one parameter with the optimizer lr
// below, the scheduler built as the engine builds it (the class called with the JSON params);
// then per update: record param_groups[0]['lr'], optimizer.step(), scheduler.step() (what
// DeepSpeedEngine._take_model_step does). Printed with repr(), i.e. exactly.

// WarmupLR(warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=10), log; optimizer lr 3e-4
const std::vector<double> kWarmupLogOracle = {
    1e-05, 1e-05, 0.0003080196957073414, 0.00048235004217246576, 0.0006060393914146827, 0.0007019803042926585,
    0.0007803697378798071, 0.0008466470596141142, 0.0009040590871220239, 0.0009547000843449315,
    0.0009999999999999998, 0.001, 0.001, 0.001};
// WarmupLR(0, 2e-3, 4, "linear"); optimizer lr 5e-4
const std::vector<double> kWarmupLinearOracle = {0.0, 0.0, 0.0005, 0.001, 0.0015, 0.002, 0.002, 0.002};
// WarmupLR(1e-4, 1e-3, warmup_num_steps=1 -> DeepSpeed uses 2), log; optimizer lr 1e-3
const std::vector<double> kWarmupClampOracle = {0.0001, 0.0001, 0.001, 0.001, 0.001};
// WarmupLR(1e-5, warmup_max_lr absent: the optimizer's lr, 3, "linear"); optimizer lr 4e-4
const std::vector<double> kWarmupDefaultMaxOracle = {1e-05, 1e-05, 0.00014, 0.00027, 0.0004, 0.0004};
// WarmupDecayLR(total_num_steps=20, 1e-5, 1e-3, 5), log; optimizer lr 1e-3
const std::vector<double> kWarmupDecayLogOracle = {
    1e-05, 1e-05, 0.00043636979249265915, 0.0006857801325411255, 0.0008627395849853183, 0.001, 0.001, 0.000934,
    0.0008680000000000001, 0.0008020000000000001, 0.000736, 0.00067, 0.000604, 0.0005380000000000001,
    0.00047200000000000003, 0.00040600000000000006, 0.00034, 0.00027400000000000005, 0.00020800000000000001,
    0.000142, 7.6e-05, 1e-05, 1e-05, 1e-05};
// WarmupDecayLR(total_num_steps=10, 0, 1e-3, 4, "linear"); optimizer lr 1e-3
const std::vector<double> kWarmupDecayLinearOracle = {
    0.0, 0.0, 0.00025, 0.0005, 0.00075, 0.001, 0.0008333333333333334, 0.0006666666666666666, 0.0005,
    0.0003333333333333333, 0.00016666666666666666, 0.0, 0.0};
// WarmupCosineLR(total_num_steps=20, warmup_min_ratio=0.1, warmup_num_steps=5), log, cos_min_ratio
// 1e-4 (default); optimizer lr 2e-3. Past the end the ratio stays at cos_min_ratio.
const std::vector<double> kWarmupCosineLogOracle = {
    0.0, 0.0002, 0.0009752178045321076, 0.0014286911500747737, 0.0017504356090642151, 0.002, 0.0019781497859737325,
    0.0019135541030968367, 0.00180903609267551, 0.0016691636932982224, 0.00150005, 0.00130908609267551,
    0.001104618010421327, 0.0008955819895786735, 0.0006911139073244902, 0.0005001500000000002,
    0.00033103630670177795, 0.00019116390732449014, 8.664589690316329e-05, 2.205021402626769e-05,
    2.0000000000000002e-07, 2.0000000000000002e-07, 2.0000000000000002e-07, 2.0000000000000002e-07};
// WarmupCosineLR(total_num_steps=12, warmup_min_ratio=0, warmup_num_steps=4, cos_min_ratio=0.05,
// "linear"); optimizer lr 1e-3
const std::vector<double> kWarmupCosineLinearOracle = {
    0.0, 0.0, 0.00025, 0.0005, 0.00075, 0.0009638427779428612, 0.0008608757210636101, 0.0007067746303734177,
    0.0005250000000000001, 0.00034322536962658233, 0.00018912427893638995, 8.61572220571388e-05, 5e-05, 5e-05,
    5e-05};
// transformers get_linear_schedule_with_warmup(optimizer, 3, 10); optimizer lr 1e-3
const std::vector<double> kHfLinearOracle = {
    0.0, 0.0003333333333333333, 0.0006666666666666666, 0.001, 0.0008571428571428571, 0.0007142857142857143,
    0.0005714285714285714, 0.00042857142857142855, 0.0002857142857142857, 0.00014285714285714284, 0.0, 0.0};
// transformers get_cosine_schedule_with_warmup(optimizer, 3, 10); optimizer lr 1e-3 (rises past the end)
const std::vector<double> kHfCosineOracle = {
    0.0, 0.0003333333333333333, 0.0006666666666666666, 0.001, 0.0009504844339512095, 0.0008117449009293668,
    0.0006112604669781572, 0.00038873953302184284, 0.00018825509907063325, 4.9515566048790485e-05, 0.0,
    4.951556604879043e-05, 0.00018825509907063315};
// transformers get_linear_schedule_with_warmup(optimizer, 0, 5); optimizer lr 2e-5
const std::vector<double> kHfLinearNoWarmupOracle = {2e-05, 1.6000000000000003e-05, 1.2e-05, 8.000000000000001e-06,
                                                     4.000000000000001e-06, 0.0};

}  // namespace

BOOST_AUTO_TEST_SUITE(lr_schedule)

BOOST_AUTO_TEST_CASE(constant_is_the_optimizer_lr) {
  SchedulerConfig s;  // default: constant
  for (int64_t step : {0, 1, 7, 1000000}) BOOST_CHECK_EQUAL(learning_rate_at(s, 3e-4, step), 3e-4);
}

// DeepSpeed's WarmupLR, written as a function of the update index k: update 0 runs before the
// first scheduler.step() at warmup_min_lr (set by the constructor); update k >= 1 sees iteration
// k-1, i.e. the log warmup fraction ln(k)/ln(W) and the linear one (k-1)/W, then the peak.
BOOST_AUTO_TEST_CASE(warmup_lr_closed_form) {
  const double min_lr = 1e-5, max_lr = 1e-3, opt_lr = 3e-4;
  const int64_t warmup = 10;
  const SchedulerConfig log_schedule = deepspeed("WarmupLR", min_lr, max_lr, warmup, "log");
  const SchedulerConfig linear_schedule = deepspeed("WarmupLR", min_lr, max_lr, warmup, "linear");
  auto expected_log = [&](int64_t k) {
    if (k == 0) return min_lr;
    if (k - 1 >= warmup) return max_lr;
    return min_lr + (max_lr - min_lr) * std::log(static_cast<double>(k)) / std::log(static_cast<double>(warmup));
  };
  auto expected_linear = [&](int64_t k) {
    if (k == 0) return min_lr;
    if (k - 1 >= warmup) return max_lr;
    return min_lr + (max_lr - min_lr) * static_cast<double>(k - 1) / static_cast<double>(warmup);
  };
  for (int64_t k : {0, 1, 2, 5, 10, 11, 12, 500}) {
    BOOST_CHECK_MESSAGE(close(learning_rate_at(log_schedule, opt_lr, k), expected_log(k)), "log update " << k);
    BOOST_CHECK_MESSAGE(close(learning_rate_at(linear_schedule, opt_lr, k), expected_linear(k)), "linear update " << k);
  }
  // The landmarks spelled out: first update, start of warmup, end of warmup, beyond.
  BOOST_CHECK_EQUAL(learning_rate_at(log_schedule, opt_lr, 0), min_lr);  // not the optimizer's lr
  BOOST_CHECK_EQUAL(learning_rate_at(linear_schedule, opt_lr, 0), min_lr);
  BOOST_CHECK_EQUAL(learning_rate_at(log_schedule, opt_lr, 1), min_lr);  // ln(1) = 0
  BOOST_CHECK(close(learning_rate_at(log_schedule, opt_lr, 10), max_lr));  // ln(10)/ln(10)
  BOOST_CHECK_EQUAL(learning_rate_at(log_schedule, opt_lr, 11), max_lr);
  BOOST_CHECK(close(learning_rate_at(linear_schedule, opt_lr, 10), min_lr + (max_lr - min_lr) * 0.9));
}

BOOST_AUTO_TEST_CASE(warmup_lr_matches_deepspeed) {
  check_sequence(deepspeed("WarmupLR", 1e-5, 1e-3, 10, "log"), 3e-4, kWarmupLogOracle, "WarmupLR log");
  check_sequence(deepspeed("WarmupLR", 0.0, 2e-3, 4, "linear"), 5e-4, kWarmupLinearOracle, "WarmupLR linear");
  check_sequence(deepspeed("WarmupLR", 1e-4, 1e-3, 1, "log"), 1e-3, kWarmupClampOracle, "WarmupLR warmup 1");
  // An absent warmup_max_lr is the optimizer's lr in WarmupLR (ds_config marks it auto).
  SchedulerConfig default_max = deepspeed("WarmupLR", 1e-5, 1e-3, 3, "linear");
  default_max.warmup_max_lr_auto = true;
  check_sequence(default_max, 4e-4, kWarmupDefaultMaxOracle, "WarmupLR without warmup_max_lr");
}

// WarmupDecayLR: warmup_min_lr at update 0, warmup as WarmupLR, then gamma = max(0, (T - i) /
// max(1, T - W)) at iteration i = k - 1, so the peak is at update W+1 and warmup_min_lr is
// reached again at update T+1.
BOOST_AUTO_TEST_CASE(warmup_decay_lr_closed_form) {
  const double min_lr = 1e-5, max_lr = 1e-3, opt_lr = 1e-3;
  const int64_t warmup = 5, total = 20;
  const SchedulerConfig s = deepspeed("WarmupDecayLR", min_lr, max_lr, warmup, "log", total);
  auto expected = [&](int64_t k) {
    if (k == 0) return min_lr;
    const double i = static_cast<double>(k - 1);
    if (k - 1 < warmup) return min_lr + (max_lr - min_lr) * std::log(i + 1.0) / std::log(5.0);
    const double gamma = std::max(0.0, (20.0 - i) / 15.0);
    return min_lr + (max_lr - min_lr) * gamma;
  };
  for (int64_t k = 0; k <= 30; ++k)
    BOOST_CHECK_MESSAGE(close(learning_rate_at(s, opt_lr, k), expected(k)), "update " << k);
  BOOST_CHECK_EQUAL(learning_rate_at(s, opt_lr, 0), min_lr);                               // first update
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 6), max_lr));                              // end of warmup
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 11), min_lr + (max_lr - min_lr) * 10.0 / 15.0));  // mid-decay: i = 10
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 21), min_lr));                              // last: i = T
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 1000), min_lr));                            // beyond the end
}

BOOST_AUTO_TEST_CASE(warmup_decay_lr_matches_deepspeed) {
  check_sequence(deepspeed("WarmupDecayLR", 1e-5, 1e-3, 5, "log", 20), 1e-3, kWarmupDecayLogOracle,
                 "WarmupDecayLR log");
  check_sequence(deepspeed("WarmupDecayLR", 0.0, 1e-3, 4, "linear", 10), 1e-3, kWarmupDecayLinearOracle,
                 "WarmupDecayLR linear");
}

// WarmupCosineLR, ratios of the optimizer lr: 0 at update 0 (set by the constructor), warmup from
// warmup_min_ratio to 1, then at iteration i >= W:
// max(0, c + (1 - c) * (1 + cos(pi * min(1, (i - W + 1) / (T - W)))) / 2), i.e. the floor c from
// i = T - 1 on.
BOOST_AUTO_TEST_CASE(warmup_cosine_lr_closed_form) {
  const double opt_lr = 2e-3, min_ratio = 0.1, cos_min = 1e-4;
  const int64_t warmup = 5, total = 20;
  const SchedulerConfig s = cosine_ds(total, warmup, min_ratio, cos_min, "log");
  auto expected = [&](int64_t k) {
    if (k == 0) return 0.0;
    const double i = static_cast<double>(k - 1);
    if (k - 1 < warmup) return opt_lr * (min_ratio + (1.0 - min_ratio) * std::log(i + 1.0) / std::log(5.0));
    const double cosine = (1.0 + std::cos(kPi * std::min(1.0, (i - 5.0 + 1.0) / 15.0))) / 2.0;
    return opt_lr * std::max(0.0, cos_min + (1.0 - cos_min) * cosine);
  };
  for (int64_t k = 0; k <= 26; ++k)
    BOOST_CHECK_MESSAGE(close(learning_rate_at(s, opt_lr, k), expected(k)), "update " << k);
  BOOST_CHECK_EQUAL(learning_rate_at(s, opt_lr, 0), 0.0);                  // first update: not min_ratio
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 1), opt_lr * min_ratio));  // start of warmup
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 4), opt_lr * (min_ratio + (1 - min_ratio) * std::log(4.0) / std::log(5.0))));
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 5), opt_lr));  // end of warmup: i = 4, ln(5)/ln(5)
  // Mid-decay: i - W + 1 = 7.5 is not an integer; at update 13, i = 12, the angle is 8/15 pi.
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 13), opt_lr * (cos_min + (1 - cos_min) * (1 + std::cos(kPi * 8 / 15)) / 2)));
  BOOST_CHECK(close(learning_rate_at(s, opt_lr, 20), opt_lr * cos_min));  // i = T - 1: the floor
  // Past the end the ratio stays at the floor (it rose again before DeepSpeed clamped it).
  for (int64_t k : {21, 22, 30, 1000})
    BOOST_CHECK_MESSAGE(close(learning_rate_at(s, opt_lr, k), opt_lr * cos_min), "past the end: update " << k);
}

BOOST_AUTO_TEST_CASE(warmup_cosine_lr_matches_deepspeed) {
  check_sequence(cosine_ds(20, 5, 0.1, 1e-4, "log"), 2e-3, kWarmupCosineLogOracle, "WarmupCosineLR log");
  check_sequence(cosine_ds(12, 4, 0.0, 0.05, "linear"), 1e-3, kWarmupCosineLinearOracle, "WarmupCosineLR linear");
}

// HF: update k uses lr * lambda(k) (LambdaLR steps once in its constructor).
// linear: k/W in warmup, then max(0, (T-k)/(T-W)); cosine: 0.5 * (1 + cos(pi * (k-W)/(T-W))).
BOOST_AUTO_TEST_CASE(hf_schedules_closed_form) {
  const double opt_lr = 1e-3;
  const SchedulerConfig linear = hf("linear", 3, 10), cosine = hf("cosine", 3, 10);
  for (int64_t k = 0; k <= 14; ++k) {
    const double kk = static_cast<double>(k);
    const double warm = kk / 3.0;
    const double linear_expected = opt_lr * (k < 3 ? warm : std::max(0.0, (10.0 - kk) / 7.0));
    const double cosine_expected = opt_lr * (k < 3 ? warm : std::max(0.0, 0.5 * (1.0 + std::cos(kPi * (kk - 3.0) / 7.0))));
    BOOST_CHECK_MESSAGE(close(learning_rate_at(linear, opt_lr, k), linear_expected), "linear update " << k);
    BOOST_CHECK_MESSAGE(close(learning_rate_at(cosine, opt_lr, k), cosine_expected), "cosine update " << k);
  }
  BOOST_CHECK_EQUAL(learning_rate_at(linear, opt_lr, 0), 0.0);  // the first update has lr 0 in HF
  BOOST_CHECK(close(learning_rate_at(linear, opt_lr, 3), opt_lr));  // end of warmup: the peak
  BOOST_CHECK_EQUAL(learning_rate_at(linear, opt_lr, 10), 0.0);    // last step
  BOOST_CHECK_EQUAL(learning_rate_at(linear, opt_lr, 50), 0.0);    // beyond the end
  // No warmup: the first update has the full lr.
  BOOST_CHECK_EQUAL(learning_rate_at(hf("linear", 0, 5), 2e-5, 0), 2e-5);
}

BOOST_AUTO_TEST_CASE(hf_schedules_match_transformers) {
  check_sequence(hf("linear", 3, 10), 1e-3, kHfLinearOracle, "HF linear");
  check_sequence(hf("cosine", 3, 10), 1e-3, kHfCosineOracle, "HF cosine");
  check_sequence(hf("linear", 0, 5), 2e-5, kHfLinearNoWarmupOracle, "HF linear without warmup");
}

BOOST_AUTO_TEST_CASE(warmup_max_lr_auto_follows_the_optimizer_lr) {
  SchedulerConfig s = deepspeed("WarmupDecayLR", 0.0, 123.0, 4, "linear", 10);
  s.warmup_max_lr_auto = true;
  BOOST_CHECK(close(learning_rate_at(s, 2e-3, 5), 2e-3));  // the peak is the optimizer lr, not 123
  s.total_num_steps = 0;
  zt::resolve_schedule(s, 2e-3, 40);
  BOOST_CHECK_EQUAL(s.total_num_steps, 40);
  BOOST_CHECK_EQUAL(s.warmup_max_lr, 2e-3);
  BOOST_CHECK(!s.warmup_max_lr_auto);
  zt::resolve_schedule(s, 2e-3, 99);  // an explicit total is kept
  BOOST_CHECK_EQUAL(s.total_num_steps, 40);
}

BOOST_AUTO_TEST_CASE(invalid_schedules_are_refused) {
  SchedulerConfig unknown;
  unknown.type = "WarmupLr";
  check_error([&] { zt::validate_schedule(unknown); },
              "scheduler type 'WarmupLr' is unknown (valid: constant, WarmupLR, WarmupDecayLR, WarmupCosineLR, linear, "
              "cosine)");
  check_error([&] { learning_rate_at(unknown, 1e-3, 0); }, "is unknown");
  check_error([&] { zt::validate_schedule(deepspeed("WarmupDecayLR", 0, 1e-3, 10, "log", 10)); },
              "scheduler WarmupDecayLR: total_num_steps 10 must be greater than warmup_num_steps 10");
  check_error([&] { zt::validate_schedule(deepspeed("WarmupDecayLR", 0, 1e-3, 1, "log", 2)); },
              "total_num_steps 2 must be greater than warmup_num_steps 2 (DeepSpeed counts warmup_num_steps 1 as 2)");
  // Current DeepSpeed raises ValueError for warmup_num_steps <= 0 (all three classes).
  check_error([&] { zt::validate_schedule(deepspeed("WarmupLR", 0, 1e-3, 0, "log")); },
              "scheduler WarmupLR: warmup_num_steps 0 must be a positive integer");
  check_error([&] { zt::validate_schedule(deepspeed("WarmupDecayLR", 0, 1e-3, -3, "linear", 10)); },
              "scheduler WarmupDecayLR: warmup_num_steps -3 must be a positive integer");
  check_error([&] { learning_rate_at(cosine_ds(10, 0, 0, 0, "log"), 1e-3, 3); },
              "scheduler WarmupCosineLR: warmup_num_steps 0 must be a positive integer");
  // DeepSpeed only warns here (its clamped cosine then stays at the floor after warmup); we refuse
  // such a misconfigured run.
  check_error([&] { zt::validate_schedule(cosine_ds(5, 8, 0, 0, "log")); },
              "scheduler WarmupCosineLR: total_num_steps 5 must be greater than warmup_num_steps 8");
  check_error([&] { zt::validate_schedule(hf("cosine", 0, 0)); },
              "scheduler cosine: total_num_steps 0 must be greater than warmup_steps 0 (0: total_num_steps was not "
              "given or derived from the run length)");
  check_error([&] { zt::validate_schedule(hf("linear", 10, 10)); }, "total_num_steps 10 must be greater than warmup_steps 10");
  check_error([&] { zt::validate_schedule(deepspeed("WarmupLR", 0, 1e-3, 10, "cosine")); },
              "scheduler WarmupLR: warmup_type 'cosine' is not one of log, linear");
  check_error([&] { zt::validate_schedule(deepspeed("WarmupLR", -1e-3, 1e-3, 10, "log")); }, "warmup_min_lr");
  check_error([&] { zt::validate_schedule(hf("linear", -1, 10)); }, "warmup_steps -1 must be >= 0");
  check_error([&] { learning_rate_at(hf("linear", 1, 10), 1e-3, -1); }, "step -1 must be >= 0");
  // WarmupLR has no decay, so it needs no total.
  BOOST_CHECK_NO_THROW(zt::validate_schedule(deepspeed("WarmupLR", 0, 1e-3, 10, "log", 0)));
}

// DeepSpeed divides the gradients by max(1, (norm + 1e-6) / clip) (ZeRO unscale_and_clip_grads).
BOOST_AUTO_TEST_CASE(clip_coefficient_is_deepspeeds) {
  BOOST_CHECK_EQUAL(zt::clip_coefficient(2.0, 1.0), static_cast<float>((2.0 + 1e-6) / 1.0));
  BOOST_CHECK_EQUAL(zt::clip_coefficient(10.0, 4.0), static_cast<float>((10.0 + 1e-6) / 4.0));
  BOOST_CHECK_EQUAL(zt::clip_coefficient(0.5, 1.0), 1.0f);  // below the threshold: untouched
  BOOST_CHECK_EQUAL(zt::clip_coefficient(0.0, 1.0), 1.0f);
  // At exactly the threshold DeepSpeed still divides by 1 + 1e-6 / clip.
  BOOST_CHECK_EQUAL(zt::clip_coefficient(1e-3, 1e-3), static_cast<float>((1e-3 + 1e-6) / 1e-3));
  BOOST_CHECK_GT(zt::clip_coefficient(1e-3, 1e-3), 1.0f);
  // 0 (DeepSpeed's default) and negative values disable clipping, whatever the norm.
  BOOST_CHECK_EQUAL(zt::clip_coefficient(1e6, 0.0), 1.0f);
  BOOST_CHECK_EQUAL(zt::clip_coefficient(1e6, -1.0), 1.0f);
  BOOST_CHECK_EQUAL(zt::clip_coefficient(std::nan(""), 0.0), 1.0f);
  // After dividing, the norm is at most the threshold.
  const double norm = 37.25, clip = 1.5;
  BOOST_CHECK_LE(norm / zt::clip_coefficient(norm, clip), clip);
  // A non-finite norm cannot be clipped: NaN makes the caller's skip unavoidable.
  BOOST_CHECK(std::isnan(zt::clip_coefficient(INFINITY, 1.0)));
  BOOST_CHECK(std::isnan(zt::clip_coefficient(std::nan(""), 1.0)));
}

BOOST_AUTO_TEST_SUITE_END()
