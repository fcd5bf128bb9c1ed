// SchedulerConfig and LossScalerConfig: DeepSpeed's "scheduler" and "fp16" sections (HF's
// linear/cosine schedules too), as optim/lr_schedule.h and optim/loss_scaler.h read them.
#pragma once
#include <cstdint>
#include <string>

namespace zt {

struct SchedulerConfig {
  // constant | WarmupLR | WarmupDecayLR | WarmupCosineLR (DeepSpeed) | linear | cosine (HF,
  // with warmup). Names are matched as DeepSpeed and HF spell them.
  std::string type = "constant";
  // DeepSpeed WarmupLR / WarmupDecayLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  // DeepSpeed JSON "warmup_max_lr": "auto" (HF integration): the peak is the optimizer's lr,
  // whatever later flags set it to; learning_rate_at and to_json read it that way.
  bool warmup_max_lr_auto = false;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR, linear, cosine; 0: the
                                    // run's length (the trainer fills it in)
  // DeepSpeed WarmupCosineLR (ratios of the optimizer's lr)
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
  // HF linear/cosine: warmup steps from 0 to the optimizer's lr, then decay to 0
  int64_t warmup_steps = 0;
};

struct LossScalerConfig {  // DeepSpeed "fp16" section (dynamic when loss_scale == 0)
  double loss_scale = 0.0;
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

}  // namespace zt
