// StepRunner (see step_runner.h).
#include "train/step_runner.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "backend/allocation_log.h"
#include "ckpt/checkpoint_checks.h"
#include "core/fault_injection.h"
#include "model/safetensors.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

namespace zt {

namespace {

// A host copy of a tensor that may live on a device.
std::vector<float> host_copy(Backend& backend, Tensor tensor) {
  std::vector<float> host(static_cast<size_t>(tensor.numel()));
  backend.copy(Tensor(host.data(), DType::F32, {tensor.numel()}), tensor.reshaped({tensor.numel()}));
  return host;
}

// --dump-step0: logits of micro-batch 0, the step-0 loss and every trainable gradient.
void write_step0_dump(const std::string& path, const std::vector<float>& logits, int64_t batch, int64_t seq,
                      int64_t vocab, double loss, const ParamStore& store, Backend& backend) {
  const float loss_value = static_cast<float>(loss);
  std::vector<std::vector<float>> grads;  // host copies
  std::vector<SafetensorsEntry> entries;
  entries.push_back({"logits", {batch, seq, vocab}, logits.data(), DType::F32, DType::F32});
  entries.push_back({"loss", {1}, &loss_value, DType::F32, DType::F32});
  for (const ParamEntry& entry : store.entries()) {
    if (entry.group == ParamGroup::Frozen) continue;
    grads.push_back(host_copy(backend, store.grad(entry.spec.name)));
    entries.push_back({"grad." + entry.spec.name, entry.spec.shape, grads.back().data(), DType::F32, DType::F32});
  }
  write_safetensors(path, entries);
}

}  // namespace

// A step's StageWork: the runner's work on micro-batches of `batches` for a pipeline stage.
class StepRunner::StageWorkOfStep final : public StageWork {
 public:
  StageWorkOfStep(StepRunner& runner, int64_t step, int64_t updates_done, StepBatches& batches, StepOutcome& outcome,
                  StepProfiler* profiler)
      : runner_(runner), step_(step), updates_done_(updates_done), batches_(batches), outcome_(outcome),
        profiler_(profiler) {}
  int64_t micro_batches() const override { return static_cast<int64_t>(batches_.micro.size()); }
  int64_t rows(int64_t micro) const override {
    const MicroBatch& batch = batches_.micro.at(static_cast<size_t>(micro));
    return batch.batch * batch.seq;
  }
  Tensor forward(int64_t micro, int chunk, Tensor input) override {
    return runner_.stage_forward(micro, chunk, batches_, input);
  }
  Tensor backward(int64_t micro, int chunk, Tensor d_output, bool overlap_reduction) override {
    return runner_.stage_backward(step_, micro, chunk, batches_, d_output, overlap_reduction);
  }
  void reduce() override { runner_.reduce(step_, outcome_); }
  void update() override { runner_.update(updates_done_, outcome_, profiler_); }

 private:
  StepRunner& runner_;
  int64_t step_, updates_done_;
  StepBatches& batches_;
  StepOutcome& outcome_;
  StepProfiler* profiler_;
};

StepRunner::StepRunner(const StepConfig& config, CausalLM& model, Objective& objective, ZeroEngine& engine,
                       ParamStore& store, Backend& backend, Communicator& comm, Communicator& control,
                       DynamicLossScaler* scaler, int64_t vocab_size)
    : config_(config), model_(model), objective_(objective), engine_(engine), store_(store), backend_(backend), comm_(comm), control_(control),
      scaler_(scaler), vocab_size_(vocab_size), step_loss_sum_(backend, sizeof(double)),
      host_(backend.make_host_backend()), host_loss_sum_(*host_, sizeof(double)) {
  // The per-bucket update fixes the step's scalars before the backward (docs/zero-offload.md).
  ZT_CHECK(!engine.updates_per_bucket() || config.gradient_clipping <= 0.0, "--update-per-bucket with "
           "gradient_clipping ", config.gradient_clipping, ": clipping scales every gradient by the global norm, which "
           "is known only after the whole backward (set gradient_clipping 0, or leave out --update-per-bucket)");
}

StepOutcome StepRunner::run(int64_t step, int64_t updates_done, StepBatches& batches,
                            const std::vector<StepInstruction>& schedule, StepProfiler* profiler) {
  log_allocation_mark(backend_, "step");
  StepOutcome outcome = run_schedule(step, updates_done, batches, schedule, profiler);
  log_allocation_mark(backend_, "stepped");
  stop_if_diverged(step, outcome);
  return outcome;
}

void StepRunner::stop_if_diverged(int64_t step, const StepOutcome& outcome) {
  // A skip with a finite norm (no target tokens) says nothing about divergence.
  if (!outcome.skipped || std::isfinite(outcome.grad_norm)) {
    if (!outcome.skipped) non_finite_steps_ = 0;
    return;
  }
  // Non-finite weights never recover (every later gradient is NaN too): stop at once, before a
  // save could make them `latest` (save_checkpoint refuses that as well).
  if (!master_weights_finite(engine_, comm_))
    fail("step ", step + 1, ": the weights are not finite (NaN or inf): the run diverged (", *outcome.skipped,
         "). No checkpoint of these weights was saved; `latest` still names the last finite one. Lower the learning "
         "rate, set gradient_clipping, or train in bf16 instead of fp16, then --resume auto");
  // fp16 with a dynamic scale: the scale drops, and DynamicLossScaler stops the run at min_loss_scale.
  if (scaler_ && scaler_->dynamic()) return;
  if (++non_finite_steps_ < kMaxNonFiniteSteps) return;
  fail("step ", step + 1, ": ", kMaxNonFiniteSteps, " consecutive steps were skipped because the gradient is not "
       "finite (NaN or inf) although the weights are (", *outcome.skipped, "): the activations overflow (the run is "
       "diverging", scaler_ ? ", or the static fp16.loss_scale is too large" : "", "). Lower the learning rate or set "
       "gradient_clipping, then --resume auto from the last checkpoint");
}

StepOutcome StepRunner::run_schedule(int64_t step, int64_t updates_done, StepBatches& batches,
                                     const std::vector<StepInstruction>& schedule, StepProfiler* profiler) {
  StepOutcome outcome;
  int64_t local_targets = 0;
  for (const MicroBatch& micro : batches.micro) local_targets += micro.target_tokens;
  outcome.target_tokens = static_cast<int64_t>(comm_.all_reduce_sum(static_cast<double>(local_targets)));
  // The backward seed: 1 / target tokens (the loss contract), times the fp16 loss scale.
  outcome.loss_scale = scaler_ ? scaler_->scale() : 1.0f;
  grad_scale_ = outcome.target_tokens > 0 ? outcome.loss_scale / static_cast<float>(outcome.target_tokens) : 0.0f;
  dropout_ = DropoutContext{config_.seed, static_cast<uint32_t>(step), Tensor()};
  for (double& sum : sums_) sum = 0.0;
  objective_.take_host_loss_sum();  // (a step that read no sum leaves none behind)
  reduced_ = norm_measured_ = false;
  backend_.fill(step_loss_sum_.view(DType::F64, {1}), 0.0f);  // on the device: no upload
  enter(StepPart::Engine);
  engine_.begin_step(updates_done + 1);
  // --update-per-bucket: the update's scalars are known now (no clipping, no fp16 scale, checked at
  // start); a global batch without target tokens is skipped as usual, so nothing runs per bucket.
  if (engine_.updates_per_bucket() && outcome.target_tokens > 0)
    engine_.arm_bucket_update(OptimizerStep{learning_rate_at(config_.scheduler, config_.peak_lr, updates_done),
                                            outcome.loss_scale, updates_done + 1, 1.0f});
  const int64_t last_micro = static_cast<int64_t>(batches.micro.size()) - 1;
  for (const StepInstruction& instruction : schedule) {
    switch (instruction.op) {
      case StepOp::Forward: forward(step, instruction.micro, batches, instruction.micro == last_micro); break;
      case StepOp::Backward: backward(step, instruction.micro, batches); break;
      case StepOp::ReduceGradients: reduce(step, outcome); break;
      case StepOp::Update: update(updates_done, outcome, profiler); break;
      case StepOp::BeginNormPass: begin_norm_pass(); break;
      case StepOp::BeginUpdatePass:
        if (!begin_update_pass(updates_done, outcome)) {  // skipped: no update pass
          finish_sums(outcome);
          return outcome;
        }
        break;
      case StepOp::FinishFusedUpdate: finish_fused_update(outcome); break;
      case StepOp::PipelineStage: {
        ZT_CHECK(pipeline_, "step schedule: a pipeline stage's instructions without a pipeline engine");
        StageWorkOfStep work(*this, step, updates_done, batches, outcome, profiler);
        pipeline_->run_step(work);
        break;
      }
    }
  }
  finish_sums(outcome);
  return outcome;
}

MicroBatch& StepRunner::view_micro_batch(const char* schedule, int64_t micro, StepBatches& batches) {
  ZT_CHECK(micro >= 0 && micro < static_cast<int64_t>(batches.micro.size()), schedule, ": micro-batch ", micro,
           " of ", batches.micro.size());
  enter(StepPart::Model);
  MicroBatch& batch = batches.micro[static_cast<size_t>(micro)];
  batch_ = batch_views(batch, backend_, device_batch_);
  dropout_.row_ids = batch_.row_ids;
  return batch;
}

void StepRunner::forward(int64_t step, int64_t micro, StepBatches& batches, bool last) {
  const MicroBatch& batch = view_micro_batch("step schedule", micro, batches);
  enter(StepPart::Engine);
  engine_.begin_micro_batch(last);
  enter(StepPart::Model);
  const bool dump = step == 0 && micro == 0 && !config_.dump_step0_path.empty();
  model_.keep_logits(dump);  // the whole [B*T, V] logits only for the dump
  Tensor logits = objective_.forward(model_, batch, batch_, dropout_);
  if (dump) {
    step0_logits_ = host_copy(backend_, logits);
    step0_batch_ = batch_.batch;
    step0_seq_ = batch_.seq;
  }
}

void StepRunner::backward(int64_t step, int64_t micro, StepBatches& batches) {
  if (config_.fault_points) fault_point("step", step + 1);
  enter(StepPart::Model);
  objective_.backward(model_, batches.micro[static_cast<size_t>(micro)], batch_, grad_scale_, dropout_,
                      step_loss_sum_.view(DType::F64, {1}));
  enter(StepPart::Engine);
  engine_.end_micro_batch();
  if (reduced_) return;  // a fused optimizer's second pass over the same micro-batch
  count_micro_batch(batches.micro[static_cast<size_t>(micro)], model_);
}

// The metrics' sums of a micro-batch whose backward ran (batch_ holds its views).
// Under an interleaved pipeline each chunk's backward counts its chunk's FLOPs; the tokens once.
void StepRunner::count_micro_batch(const MicroBatch& micro, const CausalLM& model) {
  const int64_t tokens = batch_.batch * batch_.seq;
  if (&model == &model_) {
    sums_[1] += static_cast<double>(micro.real_tokens);
    sums_[2] += static_cast<double>(tokens);
  }
  sums_[3] += 2.0 * model.forward_flops(tokens, batch_.attention_pairs) + model.trainable_weight_flops(tokens);
}

CausalLM& StepRunner::chunk_model(int chunk) {
  if (chunk == 0) return model_;
  ZT_CHECK(chunk > 0 && static_cast<size_t>(chunk) <= more_chunks_.size(), "pipeline schedule: model chunk ", chunk,
           " of ", more_chunks_.size() + 1);
  return *more_chunks_[static_cast<size_t>(chunk) - 1];
}

Tensor StepRunner::stage_forward(int64_t micro, int chunk, StepBatches& batches, Tensor input) {
  view_micro_batch("pipeline schedule", micro, batches);
  return chunk_model(chunk).forward_stage(batch_, dropout_, input);
}

// The chunk's backward of micro-batch `micro`, after the chunk's forward of it (the views made
// again: another chunk's forward may have come between). With `overlap_reduction` the schedule
// runs the backwards in micro-batch order, so the last one is the step's last.
Tensor StepRunner::stage_backward(int64_t step, int64_t micro, int chunk, StepBatches& batches, Tensor d_output,
                                  bool overlap_reduction) {
  if (config_.fault_points) fault_point("step", step + 1);
  const MicroBatch& batch = view_micro_batch("pipeline schedule", micro, batches);
  enter(StepPart::Engine);
  engine_.begin_micro_batch(overlap_reduction && micro + 1 == static_cast<int64_t>(batches.micro.size()));
  enter(StepPart::Model);
  Tensor d_input = chunk_model(chunk).backward_stage(batch_, grad_scale_, dropout_, step_loss_sum_.view(DType::F64, {1}),
                                                     d_output);
  enter(StepPart::Engine);
  engine_.end_micro_batch();
  count_micro_batch(batch, chunk_model(chunk));
  return d_input;
}

void StepRunner::reduce(int64_t step, StepOutcome& outcome) {
  reduced_ = true;
  enter(StepPart::Engine);
  // Queued behind the backward; the host reads it once the gradient check has waited anyway.
  backend_.copy_async(host_loss_sum_.view(DType::F64, {1}), step_loss_sum_.view(DType::F64, {1}));
  loss_copied_ = backend_.record_event();
  if (step == 0 && !config_.dump_step0_path.empty()) {
    finish_sums(outcome);
    write_step0_dump(config_.dump_step0_path, step0_logits_, step0_batch_, step0_seq_, vocab_size_, outcome.loss, store_,
                     backend_);
  }
  engine_.reduce_gradients();
}

void StepRunner::finish_sums(StepOutcome& outcome) {
  if (!loss_copied_) return;  // read already (--dump-step0), or no reduce in this step
  loss_copied_->wait();
  loss_copied_.reset();
  // Read through the host backend (a plain copy of host memory; nothing on the counting backend).
  host_->copy(Tensor(&sums_[0], DType::F64, {1}), host_loss_sum_.view(DType::F64, {1}));
  sums_[0] += objective_.take_host_loss_sum();  // reward's and DPO's losses, computed on the host
  comm_.all_reduce_scalars(sums_);
  if (pipeline_) pipeline_->combine_sums(sums_);
  outcome.loss = outcome.target_tokens > 0 ? sums_[0] / static_cast<double>(outcome.target_tokens) : 0.0;
  outcome.real_tokens = sums_[1];
  outcome.padded_tokens = sums_[2];
  outcome.flops = sums_[3];
}

// `check`: the step's gradient norm and overflow flag (engine_.check_gradients()). An overflow
// matters with a loss scaler (fp16); without one, a non-finite norm skips the step all the same.
std::optional<std::string> StepRunner::skip_reason(StepOutcome& outcome, const ZeroEngine::GradientCheck& check) {
  const bool overflow = scaler_ && check.overflow;
  if (scaler_) scaler_->update(overflow);
  outcome.grad_norm = overflow ? std::numeric_limits<double>::quiet_NaN() : check.norm / outcome.loss_scale;
  if (outcome.target_tokens == 0) return std::string("the global batch has no target tokens");
  if (overflow)
    return cat("fp16 gradient overflow at loss scale ", outcome.loss_scale, "; the scale is now ", scaler_->scale());
  if (!std::isfinite(outcome.grad_norm)) return std::string("the gradient is not finite");
  return std::nullopt;
}

void StepRunner::update(int64_t updates_done, StepOutcome& outcome, StepProfiler* profiler) {
  // fp16: an overflow anywhere skips the step and lowers the loss scale (DeepSpeed).
  enter(StepPart::Engine);
  outcome.lr = learning_rate_at(config_.scheduler, config_.peak_lr, updates_done);
  const ZeroEngine::GradientCheck check = engine_.check_gradients();
  outcome.skipped = skip_reason(outcome, pipeline_ ? pipeline_->combine(check) : check);
  if (outcome.skipped) {
    // A delayed update in flight (--delayed-param-update) lands now, so the next step's forward uses
    // the newest parameters (one update behind, as always) rather than falling two behind; the
    // per-bucket update of this step (--update-per-bucket) ran already on the pieces whose
    // gradients are finite: it is made current too.
    if (engine_.updates_per_bucket() && outcome.target_tokens > 0)
      outcome.skipped = cat(*outcome.skipped, ": --update-per-bucket updated the pieces whose gradients are finite "
                                              "during the backward and left the others unchanged");
    engine_.finish_delayed_update();
    return;
  }
  const float clip = clip_coefficient(outcome.grad_norm, config_.gradient_clipping);
  const auto optimizer_start = std::chrono::steady_clock::now();
  const double waited_before = control_.stats().total_wait_seconds();
  engine_.apply_update(OptimizerStep{outcome.lr, outcome.loss_scale * clip, updates_done + 1, clip});
  if (profiler) {
    double elements = 0.0;
    for (const ZeroEngine::PartitionViews& views : engine_.partition_views())
      elements += static_cast<double>(views.numel());
    profiler->table.add("optimizer", engine_.optimizer().flops_per_element() * elements,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count() -
                            (control_.stats().total_wait_seconds() - waited_before));
  }
}

// ---- optimizers fused into backward (LOMO) ---------------------------------------------------------

void StepRunner::begin_norm_pass() {
  enter(StepPart::Engine);
  engine_.begin_norm_pass();
  norm_measured_ = true;
}

bool StepRunner::begin_update_pass(int64_t updates_done, StepOutcome& outcome) {
  enter(StepPart::Engine);
  outcome.lr = learning_rate_at(config_.scheduler, config_.peak_lr, updates_done);
  float clip = 1.0f;
  if (norm_measured_) {  // LOMO's grad_norm(): skip on overflow, clip by the global norm
    outcome.skipped = skip_reason(outcome, engine_.check_gradients());
    if (outcome.skipped) return false;
    clip = clip_coefficient(outcome.grad_norm, config_.gradient_clipping);
  } else if (outcome.target_tokens == 0) {
    outcome.skipped = "the global batch has no target tokens";
    return false;
  }
  engine_.begin_update_pass(OptimizerStep{outcome.lr, outcome.loss_scale * clip, updates_done + 1, clip});
  return true;
}

void StepRunner::finish_fused_update(StepOutcome& outcome) {
  if (norm_measured_) return;  // grad_norm is the norm pass's
  enter(StepPart::Engine);
  // Without a norm pass the update ran as the gradients arrived (as LOMO's fused_backward):
  // a non-finite gradient is reported, and the units that had one were not updated.
  const bool not_finite = engine_.gradients_overflow();
  outcome.grad_norm = not_finite ? std::numeric_limits<double>::quiet_NaN() : engine_.gradient_norm() / outcome.loss_scale;
  if (not_finite || !std::isfinite(outcome.grad_norm))
    outcome.skipped = "the gradient is not finite: the update pass left the units with non-finite gradients unchanged "
                      "(set gradient_clipping to measure the norm before updating)";
}

}  // namespace zt
