// Learning-rate schedules: constant, DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR and
// HF transformers' linear / cosine with warmup, as "the lr of optimizer update number `step`".
//
// How the two libraries drive their schedulers (and so which lr each update gets):
//  - DeepSpeed (deepspeed/runtime/lr_schedules.py, engine.py, 0.15.3 and later): the
//    scheduler's constructor (last_batch_iteration = -1) sets the lr of the first update:
//    warmup_min_lr for WarmupLR/WarmupDecayLR, 0 for WarmupCosineLR; the engine calls
//    scheduler.step() after every applied optimizer step (not after an fp16-overflow skip), so
//    update k >= 1 uses the schedule's value at iteration k - 1. E.g. WarmupDecayLR(min 0,
//    max 1e-3, 2 linear warmup steps, 6 total) gives 0, 0, 5e-4, 1e-3, 7.5e-4, 5e-4 (checked by
//    running DeepSpeed's code). (DeepSpeed 0.14 and older did not set the lr at construction and
//    ran the first update at the optimizer's own lr.)
//  - HF (transformers/optimization.py): the schedules are torch LambdaLR, whose constructor
//    already takes one step, so update k (k >= 0) uses optimizer_lr * lambda(k). DeepSpeed-Chat
//    passes such a scheduler to deepspeed.initialize, which steps it the same way.
// learning_rate_at reproduces both exactly (in double precision).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "optim/schedule_config.h"

namespace zt {

// The names SchedulerConfig::type accepts, in the order messages list them.
const std::vector<std::string>& schedule_types();

// Throws zt::Error (message starting "scheduler TYPE: ...") when the schedule cannot be used:
// unknown type or warmup_type, negative values, a DeepSpeed warmup_num_steps < 1, or a decaying
// schedule whose total_num_steps is not greater than its warmup (DeepSpeed counts
// warmup_num_steps as at least 2). WarmupCosineLR is held to this too, although DeepSpeed only
// warns and keeps the lr at the cos_min_ratio floor after warmup: such a run is misconfigured.
void validate_schedule(const SchedulerConfig& schedule);

// Fills what was left open ("auto" in the DeepSpeed JSON): total_num_steps 0 becomes the run's
// total_optimizer_steps, warmup_max_lr_auto becomes optimizer_lr; then validates.
void resolve_schedule(SchedulerConfig& schedule, double optimizer_lr, int64_t total_optimizer_steps);

// The lr of the optimizer update that follows `step` applied updates (0 for the first update).
// optimizer_lr is OptimizerConfig::lr: the peak of the HF schedules and of WarmupCosineLR, the
// constant lr. Validates the schedule.
double learning_rate_at(const SchedulerConfig& schedule, double optimizer_lr, int64_t step);

}  // namespace zt
