// Learning-rate schedules (see lr_schedule.h for how DeepSpeed and HF step them). The formulas
// are DeepSpeed's lr_schedules.py (as of 0.15.3 and later: the scheduler's constructor sets the
// first lr, and WarmupCosineLR's decay stays at its floor past the end) and transformers 4.40's
// optimization.py, re-expressed.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace zt {

namespace {

bool is_deepspeed_schedule(const std::string& type) {
  return type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR";
}

bool is_hf_schedule(const std::string& type) { return type == "linear" || type == "cosine"; }

// DeepSpeed uses at least 2 warmup steps (its log warmup divides by log(warmup_num_steps)).
int64_t deepspeed_warmup_steps(const SchedulerConfig& schedule) {
  return std::max<int64_t>(2, schedule.warmup_num_steps);
}

// The warmup that total_num_steps must exceed, and the key a message names for it.
int64_t warmup_of(const SchedulerConfig& schedule) {
  return is_deepspeed_schedule(schedule.type) ? deepspeed_warmup_steps(schedule) : schedule.warmup_steps;
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// DeepSpeed's warmup fraction at iteration `iteration` < warmup (0 at the start of warmup):
// log: ln(iteration + 1) / ln(warmup), linear: iteration / warmup.
double deepspeed_warmup_fraction(const SchedulerConfig& schedule, int64_t iteration) {
  const double warmup = static_cast<double>(deepspeed_warmup_steps(schedule));
  const double it = static_cast<double>(iteration);
  if (schedule.warmup_type == "log") return (1.0 / std::log(warmup)) * std::log(it + 1.0);  // DeepSpeed's order
  return it / warmup;
}

// DeepSpeed's schedules at scheduler iteration `iteration` (>= 0, i.e. after the first step()).
double deepspeed_lr(const SchedulerConfig& schedule, double optimizer_lr, int64_t iteration) {
  const int64_t warmup = deepspeed_warmup_steps(schedule);
  const double total = static_cast<double>(schedule.total_num_steps);
  const double it = static_cast<double>(iteration);
  if (schedule.type == "WarmupCosineLR") {  // ratios of the optimizer's lr
    if (iteration < warmup) {
      const double fraction = deepspeed_warmup_fraction(schedule, iteration);
      return optimizer_lr * (schedule.warmup_min_ratio + fraction * (1.0 - schedule.warmup_min_ratio));
    }
    // DeepSpeed counts the decay from 1 at iteration == warmup, so the peak ratio 1.0 itself is
    // never used; the progress is clamped at 1, so past total_num_steps the ratio stays at
    // cos_min_ratio.
    const double decay_step = static_cast<double>(iteration - warmup + 1);
    const double decay_steps = std::max(1.0, total - static_cast<double>(warmup));
    const double progress = std::min(1.0, decay_step / decay_steps);
    const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    return optimizer_lr * std::max(0.0, schedule.cos_min_ratio + (1.0 - schedule.cos_min_ratio) * cosine);
  }
  const double min_lr = schedule.warmup_min_lr;
  const double max_lr = schedule.warmup_max_lr_auto ? optimizer_lr : schedule.warmup_max_lr;
  double gamma = 1.0;  // WarmupLR stays at max_lr after warmup
  if (iteration < warmup) {
    gamma = deepspeed_warmup_fraction(schedule, iteration);
  } else if (schedule.type == "WarmupDecayLR") {  // linear decay to min_lr at total_num_steps
    gamma = std::max(0.0, (total - it) / std::max(1.0, total - static_cast<double>(warmup)));
  }
  return min_lr + (max_lr - min_lr) * gamma;
}

// HF's LambdaLR multipliers at update `step` (linear: to 0 at total_num_steps; cosine: half a
// cosine period, num_cycles = 0.5, which rises again past total_num_steps as HF's does).
double hf_multiplier(const SchedulerConfig& schedule, int64_t step) {
  const double warmup = static_cast<double>(schedule.warmup_steps);
  const double total = static_cast<double>(schedule.total_num_steps);
  const double s = static_cast<double>(step);
  if (step < schedule.warmup_steps) return s / std::max(1.0, warmup);
  if (schedule.type == "linear") return std::max(0.0, (total - s) / std::max(1.0, total - warmup));
  const double progress = (s - warmup) / std::max(1.0, total - warmup);
  return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

void check_non_negative(const SchedulerConfig& schedule, const char* key, double value) {
  ZT_CHECK(std::isfinite(value) && value >= 0.0, "scheduler ", schedule.type, ": ", key, " ", value,
           " must be a finite number >= 0");
}

}  // namespace

const std::vector<std::string>& schedule_types() {
  static const std::vector<std::string> types = {"constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                                 "linear",   "cosine"};
  return types;
}

void validate_schedule(const SchedulerConfig& schedule) {
  const std::vector<std::string>& types = schedule_types();
  ZT_CHECK(std::find(types.begin(), types.end(), schedule.type) != types.end(), "scheduler type '", schedule.type,
           "' is unknown (valid: ", join(types), ")");
  if (schedule.type == "constant") return;

  if (is_deepspeed_schedule(schedule.type)) {
    ZT_CHECK(schedule.warmup_type == "log" || schedule.warmup_type == "linear", "scheduler ", schedule.type,
             ": warmup_type '", schedule.warmup_type, "' is not one of log, linear");
    // Current DeepSpeed raises ValueError for warmup_num_steps <= 0 (and HF now fills "auto" with
    // max(1, warmup_steps)); 1 is then counted as 2.
    ZT_CHECK(schedule.warmup_num_steps >= 1, "scheduler ", schedule.type, ": warmup_num_steps ",
             schedule.warmup_num_steps, " must be a positive integer (DeepSpeed refuses <= 0)");
    if (schedule.type == "WarmupCosineLR") {
      check_non_negative(schedule, "warmup_min_ratio", schedule.warmup_min_ratio);
      check_non_negative(schedule, "cos_min_ratio", schedule.cos_min_ratio);
    } else {
      check_non_negative(schedule, "warmup_min_lr", schedule.warmup_min_lr);
      if (!schedule.warmup_max_lr_auto) check_non_negative(schedule, "warmup_max_lr", schedule.warmup_max_lr);
    }
  } else {
    ZT_CHECK(schedule.warmup_steps >= 0, "scheduler ", schedule.type, ": warmup_steps ", schedule.warmup_steps,
             " must be >= 0");
  }
  if (schedule.type == "WarmupLR") return;  // no decay: total_num_steps is not used

  // Decaying schedules: the decay must have room after warmup (WarmupCosineLR divides by
  // total_num_steps - warmup in DeepSpeed; the others would never reach their peak).
  const int64_t warmup = warmup_of(schedule);
  if (schedule.total_num_steps <= warmup) {
    const char* warmup_key = is_deepspeed_schedule(schedule.type) ? "warmup_num_steps" : "warmup_steps";
    std::string why;
    if (schedule.total_num_steps == 0) why = " (0: total_num_steps was not given or derived from the run length)";
    else if (is_deepspeed_schedule(schedule.type) && schedule.warmup_num_steps < 2)
      why = cat(" (DeepSpeed counts warmup_num_steps ", schedule.warmup_num_steps, " as 2)");
    fail("scheduler ", schedule.type, ": total_num_steps ", schedule.total_num_steps, " must be greater than ",
         warmup_key, " ", warmup, why);
  }
}

void resolve_schedule(SchedulerConfig& schedule, double optimizer_lr, int64_t total_optimizer_steps) {
  if (schedule.total_num_steps == 0) schedule.total_num_steps = total_optimizer_steps;
  if (schedule.warmup_max_lr_auto) {
    schedule.warmup_max_lr = optimizer_lr;
    schedule.warmup_max_lr_auto = false;
  }
  validate_schedule(schedule);
}

double learning_rate_at(const SchedulerConfig& schedule, double optimizer_lr, int64_t step) {
  validate_schedule(schedule);
  ZT_CHECK(step >= 0, "learning_rate_at: step ", step, " must be >= 0");
  if (schedule.type == "constant") return optimizer_lr;
  if (is_hf_schedule(schedule.type)) return optimizer_lr * hf_multiplier(schedule, step);
  // DeepSpeed: the scheduler's constructor (last_batch_iteration -1) sets the lr of the first
  // update: warmup_min_lr for WarmupLR/WarmupDecayLR, 0 for WarmupCosineLR. The engine steps the
  // scheduler after each applied update, so update s+1 (s >= 1) runs at iteration s-1.
  if (step == 0) return schedule.type == "WarmupCosineLR" ? 0.0 : schedule.warmup_min_lr;
  return deepspeed_lr(schedule, optimizer_lr, step - 1);
}

}  // namespace zt
