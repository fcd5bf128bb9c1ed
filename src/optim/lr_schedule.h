// Learning-rate schedules: constant, DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR and
// HF transformers' linear / cosine with warmup, as "the lr of optimizer update number `step`".
//
// How the two libraries drive their schedulers (and so which lr each update gets):
//  - DeepSpeed (deepspeed/runtime/lr_schedules.py, engine.py): the scheduler is built with
//    last_batch_iteration = -1 and is NOT stepped at construction; the engine calls
//    scheduler.step() after every applied optimizer step (not after an fp16-overflow skip).
//    So the first update uses the optimizer's own lr (optimizer.params.lr), and update k >= 1
//    uses the schedule's value at iteration k - 1. E.g. WarmupLR(min 1e-5, max 1e-3, 10 steps)
//    with optimizer lr 3e-4 gives 3e-4, 1e-5, 3.08e-4, ... (checked by running DeepSpeed's code).
//  - HF (transformers/optimization.py): the schedules are torch LambdaLR, whose constructor
//    already takes one step, so update k (k >= 0) uses optimizer_lr * lambda(k). DeepSpeed-Chat
//    passes such a scheduler to deepspeed.initialize, which steps it the same way.
// learning_rate_at reproduces both exactly (in double precision).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace zt {

// The names SchedulerConfig::type accepts, in the order messages list them.
const std::vector<std::string>& schedule_types();

// Throws zt::Error (message starting "scheduler TYPE: ...") when the schedule cannot be used:
// unknown type or warmup_type, negative values, or a decaying schedule whose total_num_steps is
// not greater than its warmup (DeepSpeed counts warmup_num_steps as at least 2).
void validate_schedule(const SchedulerConfig& schedule);

// Fills what was left open ("auto" in the DeepSpeed JSON): total_num_steps 0 becomes the run's
// total_optimizer_steps, warmup_max_lr_auto becomes optimizer_lr; then validates.
void resolve_schedule(SchedulerConfig& schedule, double optimizer_lr, int64_t total_optimizer_steps);

// The lr of the optimizer update that follows `step` applied updates (0 for the first update).
// optimizer_lr is OptimizerConfig::lr: the peak of the HF schedules and of WarmupCosineLR, the
// constant lr, and the lr of DeepSpeed's first update. Validates the schedule.
double learning_rate_at(const SchedulerConfig& schedule, double optimizer_lr, int64_t step);

}  // namespace zt
