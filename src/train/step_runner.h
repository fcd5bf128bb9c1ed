// StepRunner: executes one optimizer step's schedule (step_schedule.h) on this rank's
// micro-batches: forward/backward (the ZeRO engine reduces gradients as units complete), the
// step's loss sums over the ranks, then the update: fp16 overflow check, global norm, clipping
// and the optimizer on this rank's partitions (skipped steps advance neither the schedule nor
// the optimizer's update count, as in DeepSpeed).
// A run that diverged stops with an error instead of skipping steps forever: at a step skipped
// for a non-finite gradient (or fp16 overflow) when the weights themselves are no longer finite,
// and after kMaxNonFiniteSteps consecutive steps skipped for a non-finite gradient without a
// dynamic fp16 loss scale (bf16, fp32, or fp16 with a static fp16.loss_scale); a dynamic scale
// drops at each overflow instead, and DynamicLossScaler stops the run when an overflow finds it
// at min_loss_scale.
// Loss contract (DESIGN.md): sum of token losses over the global batch / its target tokens, so
// every micro-batch's backward is scaled by 1 / (target tokens of the whole global batch, all
// ranks): the count is all-reduced before backward. The objective (train/objective.h) says what
// a micro-batch's loss units are (MicroBatch::target_tokens: tokens, or pairs for the reward model).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "comm/communicator.h"
#include "data/batch_prefetcher.h"
#include "model/causal_lm.h"
#include "optim/loss_scaler.h"
#include "train/batch_views.h"
#include "train/objective.h"
#include "train/profiler.h"
#include "train/step_schedule.h"
#include "optim/schedule_config.h"
#include "zero/zero_engine.h"

namespace zt {

// What one step did, for metrics and messages (values summed over all ranks).
struct StepOutcome {
  double loss = 0.0;               // sum of token losses / target tokens (the loss contract)
  double lr = 0.0;                 // the learning rate the update used (or would have)
  double grad_norm = 0.0;          // global L2 norm of the unscaled gradients; NaN on fp16 overflow
  float loss_scale = 1.0f;         // the fp16 scale the backward used (1 without fp16)
  int64_t target_tokens = 0;
  double real_tokens = 0.0;        // non-padding tokens
  double padded_tokens = 0.0;      // batch x seq over the micro-batches
  double flops = 0.0;              // forward + backward FLOPs of the model
  std::optional<std::string> skipped;  // why the update was skipped, when it was
};

// --profile-step: the model's module timings plus the optimizer of the step.
class StepProfiler final : public ModuleTimer {
 public:
  void record(const char* module, double flops, double seconds) override { table.add(module, flops, seconds); }
  ProfileTable table;
};

// What a step needs of the run's configuration (step_config_of: train/run_assembly.h).
struct StepConfig {
  uint64_t seed = 42;              // dropout streams
  double peak_lr = 0.0;            // the optimizer's lr, which the schedule scales
  SchedulerConfig scheduler;       // resolved (warm-up and decay steps known)
  double gradient_clipping = 0.0;  // 0: off
  std::string dump_step0_path;     // --dump-step0, or empty
  bool fault_points = true;        // ZT_FAULT's "step" point (core/fault_injection.h); off in the memory
                                   // model's steps, which are no steps of the run
};

// Which part of the program a step is in: the model's forward/backward (and the micro-batch it
// reads) or the ZeRO engine's calls. The memory model names what each part allocates.
enum class StepPart { Model, Engine };
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void enter(StepPart part) = 0;
};

// What a pipeline stage's instructions ask of the step that runs them (the StepRunner's work on
// the stage's model, ZeRO engine and sums; train/pipe_engine.h executes the instructions).
class StageWork {
 public:
  virtual ~StageWork() = default;
  virtual int64_t micro_batches() const = 0;
  virtual int64_t rows(int64_t micro) const = 0;  // B*T of micro-batch `micro`
  // CausalLM::forward_stage of model chunk `chunk` on the micro-batch's views (its dropout masks):
  // the chunk's output.
  virtual Tensor forward(int64_t micro, int chunk, Tensor input) = 0;
  // After forward(micro): CausalLM::backward_stage within the ZeRO engine's micro-batch calls
  // (with `overlap_reduction`, the last micro-batch's backward reduces stage 0/1 gradients as
  // units complete; without, reduce() does), the micro-batch's tokens and FLOPs counted; the
  // gradient of the stage's input.
  virtual Tensor backward(int64_t micro, int chunk, Tensor d_output, bool overlap_reduction) = 0;
  virtual void reduce() = 0;  // StepOp::ReduceGradients
  virtual void update() = 0;  // StepOp::Update (its gradient check made global by PipelineStage::combine)
};

// A pipeline stage's part of a step (train/pipe_engine.h), which the StepRunner runs for
// StepOp::PipelineStage, and what makes the stage's figures the pipeline's.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual void run_step(StageWork& work) = 0;
  // The stage's gradient check (over its data-parallel group) -> the check over all stages.
  virtual ZeroEngine::GradientCheck combine(const ZeroEngine::GradientCheck& stage_check) = 0;
  // The step's sums [loss, real tokens, padded tokens, FLOPs] of the stage (summed over its
  // data-parallel group) -> the run's.
  virtual void combine_sums(std::span<double> sums) = 0;
};

// Consecutive steps skipped because the gradient is not finite (bf16/fp32, weights still finite)
// before the run stops: one bad batch is survivable, a run whose every step overflows is not.
constexpr int64_t kMaxNonFiniteSteps = 3;

class StepRunner {
 public:
  // `control` keeps the communication statistics (the optimizer row of a profile excludes its
  // waits); `scaler` is fp16's loss scaler (nullptr otherwise); `vocab_size` for --dump-step0.
  // `objective` runs each micro-batch's loss and backward (train/objective.h).
  StepRunner(const StepConfig& config, CausalLM& model, Objective& objective, ZeroEngine& engine, ParamStore& store,
             Backend& backend, Communicator& comm, Communicator& control, DynamicLossScaler* scaler, int64_t vocab_size);

  // Runs `schedule` over `batches` as optimizer step `step` (0-based), of which `updates_done`
  // updates were applied before. `profiler`: time this step's modules and optimizer (or null).
  // Throws when the run has diverged (see the top of this file).
  StepOutcome run(int64_t step, int64_t updates_done, StepBatches& batches, const std::vector<StepInstruction>& schedule,
                  StepProfiler* profiler);
  void set_observer(StepObserver* observer) { observer_ = observer; }
  // A pipeline stage's run (not owned; null: none): StepOp::PipelineStage runs its instructions,
  // and the gradient check and the step's sums go through it.
  void set_pipeline(PipelineStage* pipeline) { pipeline_ = pipeline; }
  // An interleaved pipeline's model chunks 1..V-1 (not owned; chunk 0 is the model).
  void set_more_chunks(std::vector<CausalLM*> chunks) { more_chunks_ = std::move(chunks); }

 private:
  void enter(StepPart part) {
    if (observer_) observer_->enter(part);
  }
  StepOutcome run_schedule(int64_t step, int64_t updates_done, StepBatches& batches,
                           const std::vector<StepInstruction>& schedule, StepProfiler* profiler);
  // After a step: stops the run when it has diverged (non-finite weights, or too many
  // consecutive non-finite gradients).
  void stop_if_diverged(int64_t step, const StepOutcome& outcome);
  class StageWorkOfStep;  // StageWork over one step (step_runner.cpp)
  // Enters the model part and makes batch_ (and the dropout masks' row ids) the device views of
  // micro-batch `micro`, after checking that the step has it (`schedule` names the caller).
  MicroBatch& view_micro_batch(const char* schedule, int64_t micro, StepBatches& batches);
  void forward(int64_t step, int64_t micro, StepBatches& batches, bool last);
  CausalLM& chunk_model(int chunk);
  Tensor stage_forward(int64_t micro, int chunk, StepBatches& batches, Tensor input);
  Tensor stage_backward(int64_t step, int64_t micro, int chunk, StepBatches& batches, Tensor d_output,
                        bool overlap_reduction);
  void count_micro_batch(const MicroBatch& micro, const CausalLM& model);
  void backward(int64_t step, int64_t micro, StepBatches& batches);
  void reduce(int64_t step, StepOutcome& outcome);
  // The step's loss sums over the ranks into `outcome`: reads the loss sum that reduce() queued
  // for the host (by then the gradient check has waited for the device: no wait of its own).
  void finish_sums(StepOutcome& outcome);
  void update(int64_t updates_done, StepOutcome& outcome, StepProfiler* profiler);
  // Fused optimizers (LOMO). begin_update_pass returns false when the step is skipped.
  void begin_norm_pass();
  bool begin_update_pass(int64_t updates_done, StepOutcome& outcome);
  void finish_fused_update(StepOutcome& outcome);
  // The norm pass's verdict: why the update must be skipped, if it must (fp16 overflow moves the scale).
  std::optional<std::string> skip_reason(StepOutcome& outcome, const ZeroEngine::GradientCheck& check);

  StepConfig config_;
  CausalLM& model_;
  Objective& objective_;
  ZeroEngine& engine_;
  ParamStore& store_;
  Backend& backend_;
  Communicator& comm_;
  Communicator& control_;
  DynamicLossScaler* scaler_;
  int64_t vocab_size_;
  StepObserver* observer_ = nullptr;
  PipelineStage* pipeline_ = nullptr;
  std::vector<CausalLM*> more_chunks_;
  Buffer step_loss_sum_;           // fp64 [1]: this rank's loss sum of a step, on the device
  std::unique_ptr<Backend> host_;  // pinned host memory of backend_ (make_host_backend)
  Buffer host_loss_sum_;           // fp64 [1]: its copy on the host, queued by reduce()
  std::unique_ptr<BackendEvent> loss_copied_;  // after that copy; null when nothing is queued
  DeviceBatchStorage device_batch_;  // the micro-batch on the device (GPU backends)
  // Within a step:
  BatchTensors batch_;             // the current micro-batch's views
  DropoutContext dropout_;
  float grad_scale_ = 0.0f;        // the backward seed: loss scale / target tokens
  double sums_[4] = {0.0, 0.0, 0.0, 0.0};  // loss sum, real tokens, padded tokens, FLOPs
  bool reduced_ = false;           // the step's sums are read (a second pass does not count again)
  bool norm_measured_ = false;     // a fused norm pass ran: grad_norm is known
  int64_t non_finite_steps_ = 0;   // consecutive steps skipped for a non-finite gradient
  std::vector<float> step0_logits_;  // [B, T, V] of micro-batch 0 (only for --dump-step0)
  int64_t step0_batch_ = 0, step0_seq_ = 0;
};

}  // namespace zt
