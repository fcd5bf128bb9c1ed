// The instructions of one optimizer step, in order (DeepSpeed's pipe/schedule.py idea: a
// schedule yields instructions, the step runner executes them). Gradient accumulation is the
// trivial schedule; a pipeline-parallel schedule (micro-batches interleaved over stages) or an
// optimizer fused into backward (LOMO: a norm pass, then an update pass) is another list of the
// same instructions, so the loop that runs them does not change.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class StepOp {
  Forward,          // micro-batch `micro`: the model's forward (and the loss)
  Backward,         // micro-batch `micro`: backward from its loss; the ZeRO engine reduces as units complete
  ReduceGradients,  // the step's loss sums and the gradient reduction are complete
  Update,           // overflow check, global norm, clipping, the optimizer on this rank's partitions
  // An optimizer fused into backward (LOMO):
  BeginNormPass,    // the next backward only measures the reduced gradients (global norm, overflow)
  BeginUpdatePass,  // the step's scalars from the norm pass (or without one); the next backward updates
  FinishFusedUpdate,  // the update pass's norm and overflow, for the metrics
  // A pipeline stage (train/pipe_engine.h): the stage's own instruction list of the step, its
  // forwards, backwards, sends and receives, then ReduceGradients and Update.
  PipelineStage,
};

struct StepInstruction {
  StepOp op = StepOp::Forward;
  int64_t micro = 0;  // Forward/Backward: which micro-batch
};

// Forward and backward of each of `micro_batches` micro-batches, then reduce and update.
std::vector<StepInstruction> gradient_accumulation_schedule(int64_t micro_batches);

// An optimizer fused into backward: one micro-batch (every backward updates), with a norm pass
// first when `norm_pass` (clipping by the global norm, fp16 overflow checks), as LOMO's
// grad_norm() + fused_backward().
std::vector<StepInstruction> fused_update_schedule(int64_t micro_batches, bool norm_pass);

std::string step_op_name(StepOp op);

}  // namespace zt
