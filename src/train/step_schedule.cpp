// The step schedules (see step_schedule.h).
#include "train/step_schedule.h"

#include "core/error.h"

namespace zt {

std::vector<StepInstruction> gradient_accumulation_schedule(int64_t micro_batches) {
  ZT_CHECK(micro_batches > 0, "gradient accumulation schedule: ", micro_batches, " micro-batches (must be >= 1)");
  std::vector<StepInstruction> schedule;
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    schedule.push_back({StepOp::Forward, micro});
    schedule.push_back({StepOp::Backward, micro});
  }
  schedule.push_back({StepOp::ReduceGradients, 0});
  schedule.push_back({StepOp::Update, 0});
  return schedule;
}

std::vector<StepInstruction> fused_update_schedule(int64_t micro_batches, bool norm_pass) {
  ZT_CHECK(micro_batches == 1, "the optimizer updates inside backward (LOMO), so every micro-batch would be its own "
           "update: gradient_accumulation_steps must be 1 (it is ", micro_batches,
           "); raise train_micro_batch_size_per_gpu instead");
  std::vector<StepInstruction> schedule;
  if (norm_pass) {
    schedule = {{StepOp::BeginNormPass, 0}, {StepOp::Forward, 0}, {StepOp::Backward, 0}, {StepOp::ReduceGradients, 0}};
    schedule.insert(schedule.end(), {{StepOp::BeginUpdatePass, 0}, {StepOp::Forward, 0}, {StepOp::Backward, 0}});
  } else {
    schedule = {{StepOp::BeginUpdatePass, 0}, {StepOp::Forward, 0}, {StepOp::Backward, 0}, {StepOp::ReduceGradients, 0}};
  }
  schedule.push_back({StepOp::FinishFusedUpdate, 0});
  return schedule;
}

std::string step_op_name(StepOp op) {
  switch (op) {
    case StepOp::Forward: return "forward";
    case StepOp::Backward: return "backward";
    case StepOp::ReduceGradients: return "reduce_gradients";
    case StepOp::Update: return "update";
    case StepOp::BeginNormPass: return "begin_norm_pass";
    case StepOp::BeginUpdatePass: return "begin_update_pass";
    case StepOp::FinishFusedUpdate: return "finish_fused_update";
    case StepOp::PipelineStage: return "pipeline_stage";
  }
  return "?";
}

}  // namespace zt
