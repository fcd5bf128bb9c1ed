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

std::string step_op_name(StepOp op) {
  switch (op) {
    case StepOp::Forward: return "forward";
    case StepOp::Backward: return "backward";
    case StepOp::ReduceGradients: return "reduce_gradients";
    case StepOp::Update: return "update";
  }
  return "?";
}

}  // namespace zt
