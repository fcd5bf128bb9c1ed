// The pipeline engine (pipe_engine.h): the refusals, then one step's instructions.
#include "train/pipe_engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <utility>

#include "core/error.h"
#include "pipe/stage_partition.h"
#include "train/evaluation.h"

namespace zt {

void check_pipeline_run(const TrainConfig& config, const ModelConfig& model_config, int world_size,
                        const Optimizer& optimizer) {
  const PipelineConfig& pipe = config.pipeline;
  if (!pipe.enabled()) return;
  const std::string flag = cat("--pipeline-stages ", pipe.stages);
  PipelineTopology(world_size, static_cast<int>(pipe.stages));  // P divides the world (else its error)
  ZT_CHECK(pipe.stages * pipe.chunks <= model_config.num_hidden_layers, flag, pipe.chunks > 1 ?
           cat(" x --pipeline-chunks ", pipe.chunks) : std::string(), ": the model has only ",
           model_config.num_hidden_layers, " decoder layers; a pipeline has at most one (virtual) stage per layer");
  parse_pipe_schedule(pipe.schedule, "--pipeline-schedule");
  parse_partition_method(pipe.partition_method, "--partition-method (or the JSON's pipeline.partition)");
  ZT_CHECK(config.zero.stage <= 2, flag, ": ZeRO stage 3 partitions each stage's parameters over its replicas and "
           "gathers them per use, which does not combine with a pipeline (DeepSpeed allows only ZeRO-1 with its "
           "pipeline; zerotune runs stages 0-2 inside each stage's data-parallel group)");
  ZT_CHECK(!optimizer.fuses_into_backward(), flag, ": optimizer ", optimizer.name(), " updates inside backward "
           "(LOMO-style), unit by unit as gradients complete; a pipeline's backward runs micro-batch by micro-batch "
           "over the stages, and the update needs the norm over all of them first");
  ZT_CHECK(!model_config.tie_word_embeddings || config.lora.enabled() || config.zero.stage <= 1, flag,
           ": the model ties its LM head to the token embedding (tie_word_embeddings): the first and the last stage "
           "sum the table's gradients after backward, before the ZeRO reduction, which ZeRO-2 runs during every "
           "backward; use ZeRO stage 0 or 1 (or LoRA, which freezes the table)");
  ZT_CHECK(config.objective == "sft", flag, ": the ", config.objective, " objective is not run over pipeline stages "
           "yet (only sft)");
  ZT_CHECK(!config.offload_activations, flag, ": --offload-activations does not combine with a pipeline (a stage "
           "keeps only its input per micro-batch in flight and recomputes the rest)");
  ZT_CHECK(config.dump_step0_path.empty(), flag, ": --dump-step0 needs the whole model on one rank");
}

PipeEngine::PipeEngine(const TrainConfig& config, const PipelineTopology& topology, int rank, Communicator& world,
                       Backend& backend, int64_t hidden_size, DType dtype, bool tied_across_stages,
                       bool exchanges_independent)
    : topology_(topology), rank_(rank), stage_(topology.stage_of(rank)), replica_(topology.replica_of(rank)),
      chunks_(static_cast<int>(config.pipeline.chunks)), world_(world), backend_(backend), hidden_(hidden_size),
      dtype_(dtype) {
  PipeScheduleShape shape;
  shape.ranks = topology.stages();
  shape.chunks = chunks_;
  shape.micro_batches = static_cast<int>(config.gradient_accumulation_steps);
  shape.tied_ends = tied_across_stages;
  const PipeScheduleKind kind = parse_pipe_schedule(config.pipeline.schedule, "--pipeline-schedule");
  form_ = shape.form = pipe_exchange_form(kind, exchanges_independent);
  schedule_ = make_pipe_schedule(kind, shape).at(static_cast<size_t>(stage_));
  micro_batches_ = shape.micro_batches;
  // 1F1B: micro-batch k's input is received after micro-batch k - (P - s)'s backward on stage s,
  // so P - s slots hold every input in flight; posted ahead, it is posted before that backward,
  // which still reads its own input: one slot more. GPipe and interleaved keep all of them.
  input_slots_ = kind == PipeScheduleKind::OneFOneB
                     ? std::min(topology.stages() - stage_ + (form_ == PipeExchangeForm::PostedAhead ? 1 : 0), micro_batches_)
                     : micro_batches_;
  // Posted ahead and GPipe overlapped, the next backward's gradient is received while the running
  // backward reads its own: two buffers. Interleaved overlapped, it is posted after that backward.
  grad_buffers_ = form_ == PipeExchangeForm::PostedAhead ||
                          (form_ == PipeExchangeForm::Overlapped && kind == PipeScheduleKind::GPipe) ? 2 : 1;
  inputs_.resize(static_cast<size_t>(chunks_ * input_slots_));
}

void PipeEngine::attach(ParamStore& store, const StageUnits& stage) {
  store_ = &store;
  for (const std::string& name : stage.tied_copies)
    if (store.trainable(name)) tied_copies_.push_back(name);
  for (const std::string& name : stage.tied_originals)
    if (store.trainable(name)) tied_originals_.push_back(name);
  // Whether any stage has a trainable tie: the first and last stage know; the others ask.
  tied_ = world_.all_reduce_max(tied_copies_.empty() && tied_originals_.empty() ? 0.0 : 1.0) > 0.0;
}

void PipeEngine::reduce_tied_grads() {
  const int last = topology_.stages() - 1;
  for (const std::string& name : tied_copies_) {  // the last stage: its copy's gradient to the first
    Tensor grad = store_->grad(name);
    world_.send_async(grad, topology_.rank_of(0, replica_))->wait();
    backend_.fill(grad, 0.0f);
  }
  for (const std::string& name : tied_originals_) {  // the first stage: adds it to its own
    Tensor grad = store_->grad(name);
    ensure_buffer(tied_grad_, backend_, grad.numel(), grad.dtype);
    Tensor received = tied_grad_.view(grad.dtype, {grad.numel()});
    world_.recv_async(received, topology_.rank_of(last, replica_))->wait();
    backend_.accumulate(grad.reshaped({grad.numel()}), received, 1.0f);
  }
}

void PipeEngine::share_tied_params() {
  const int last = topology_.stages() - 1;
  for (const std::string& name : tied_originals_)
    world_.send_async(store_->param(name), topology_.rank_of(last, replica_))->wait();
  for (const std::string& name : tied_copies_)
    world_.recv_async(store_->param(name), topology_.rank_of(0, replica_))->wait();
}

// Micro-batch `micro`'s input [B*T, C] of model chunk `chunk`: grown to its size when it is about
// to be received (the first virtual stage reads the tokens instead).
Tensor PipeEngine::input_of(StageWork& work, int chunk, int micro, bool for_receive) {
  if (stage_ == 0 && chunk == 0) return Tensor();
  const int64_t rows = work.rows(micro);
  Buffer& buffer = inputs_.at(static_cast<size_t>(chunk * input_slots_ + micro % input_slots_));
  if (for_receive) ensure_buffer(buffer, backend_, rows * hidden_, dtype_);
  return buffer.view(dtype_, {rows, hidden_});
}

int PipeEngine::rank_of_virtual(int virtual_stage) const {
  return topology_.rank_of(virtual_stage % topology_.stages(), replica_);
}

// One exchange_async for the group's sends and receives, completed before the next computation.
void PipeEngine::flush(Group& group) {
  if (group.transfers.empty()) return;
  const double start = trace_ ? trace_->now() : 0.0;
  world_.exchange_async(group.transfers)->wait();
  if (trace_) trace_->record("wait", -1, start, static_cast<int64_t>(Communicator::bytes_sent(group.transfers)));
  group.transfers.clear();
}

void PipeEngine::post(const PipeInstruction& instruction, Transfer transfer, Group& group) {
  group.transfers.push_back(transfer);
  group.messages.push_back({instruction.op, instruction.micro_batch, instruction.virtual_stage});
  if (form_ == PipeExchangeForm::PostedAhead) post_group(group);  // each message an exchange of its own
}

// Posted ahead, overlapped: the group's exchange started, and left to the Wait for one of its messages.
void PipeEngine::post_group(Group& group) {
  if (group.transfers.empty()) return;
  const auto posted = std::make_shared<Posted>(
      Posted{world_.exchange_async(group.transfers), Communicator::bytes_sent(group.transfers)});
  for (const auto& message : group.messages) {
    const bool fresh = posted_.emplace(message, posted).second;
    ZT_CHECK(fresh, "pipeline: ", describe({std::get<0>(message), std::get<1>(message), std::get<2>(message)}),
             " posted while the same message is still in flight");
  }
  group.transfers.clear();
  group.messages.clear();
}

void PipeEngine::complete(const PipeInstruction& wait) {
  const auto found = posted_.find({wait.waited, wait.micro_batch, wait.virtual_stage});
  ZT_CHECK(found != posted_.end(), "pipeline: ", describe(wait), " waits for a message not posted");
  const std::shared_ptr<Posted> posted = found->second;
  const double start = trace_ ? trace_->now() : 0.0;
  posted->exchange->wait();
  if (trace_) trace_->record("wait", -1, start, static_cast<int64_t>(posted->bytes_sent));
  std::erase_if(posted_, [&](const auto& entry) { return entry.second == posted; });  // the group's every message
}

// Posted ahead and overlapped: the chunk's next computation overwrites its output and input
// gradient while the send may still read them, so the send reads a copy in the send buffer of its
// kind, which the schedule's Wait frees before the next send of that kind.
Tensor PipeEngine::to_send(Tensor tensor, int kind) {
  if (form_ == PipeExchangeForm::Grouped) return tensor;
  Buffer& buffer = send_buffers_[kind];
  ensure_buffer(buffer, backend_, tensor.numel(), dtype_);
  Tensor copy = buffer.view(dtype_, {tensor.numel() / hidden_, hidden_});
  backend_.copy(copy, tensor.reshaped({tensor.numel() / hidden_, hidden_}));
  return copy;
}

// The buffer micro-batch `micro`'s output gradient [B*T, C] is received into (grown to its size).
// Where the next backward's gradient arrives while the running backward reads its own (posted
// ahead, GPipe overlapped), received gradients alternate between two buffers; interleaved
// overlapped, it is posted after that backward (the exchange runs after the computations queued
// before it), and grouped after it completed: one buffer.
Tensor PipeEngine::receive_grad_into(StageWork& work, int micro, int virtual_stage) {
  Buffer& buffer = output_grads_[grads_received_++ % grad_buffers_];
  ensure_buffer(buffer, backend_, work.rows(micro) * hidden_, dtype_);
  Tensor grad = buffer.view(dtype_, {work.rows(micro), hidden_});
  received_grads_[{micro, virtual_stage}] = grad;
  return grad;
}

void PipeEngine::run_step(StageWork& work) {
  ZT_CHECK(work.micro_batches() == micro_batches_, "pipeline: the step has ", work.micro_batches(),
           " micro-batches, the schedule ", micro_batches_);
  const int stages = topology_.stages(), last_virtual = stages * chunks_ - 1;
  Group group;
  Tensor output, input_grad;                  // the last forward's output, the last backward's input gradient
  std::vector<int> forwarded(static_cast<size_t>(chunks_), -1);  // per chunk: the micro-batch its model holds
  if (trace_) trace_->begin_step();
  bool output_unsent = false;  // the last forward's output waits for its SendActivation
  for (const PipeInstruction& instruction : schedule_) {
    const int mb = instruction.micro_batch, virtual_stage = instruction.virtual_stage;
    const int chunk = virtual_stage < 0 ? 0 : virtual_stage / stages;
    const bool message = instruction.op == PipeOp::RecvActivation || instruction.op == PipeOp::RecvGrad ||
                         instruction.op == PipeOp::SendActivation || instruction.op == PipeOp::SendGrad;
    if (form_ == PipeExchangeForm::Overlapped && !message) post_group(group);  // the run of messages before it
    switch (instruction.op) {
      case PipeOp::LoadMicroBatch: break;  // the forward loads the micro-batch's views
      case PipeOp::RecvActivation:
        post(instruction, {input_of(work, chunk, mb, true), rank_of_virtual(virtual_stage - 1), false}, group);
        break;
      case PipeOp::RecvGrad:
        post(instruction, {receive_grad_into(work, mb, virtual_stage), rank_of_virtual(virtual_stage + 1), false}, group);
        break;
      case PipeOp::SendActivation:
        post(instruction, {to_send(output, 0), rank_of_virtual(virtual_stage + 1), true}, group);
        output_unsent = false;
        break;
      case PipeOp::SendGrad: post(instruction, {to_send(input_grad, 1), rank_of_virtual(virtual_stage - 1), true}, group); break;
      case PipeOp::Wait: complete(instruction); break;
      case PipeOp::Forward: {
        flush(group);
        const double start = trace_ ? trace_->now() : 0.0;
        output = work.forward(mb, chunk, input_of(work, chunk, mb, false));
        if (trace_) trace_->record("forward", mb, start);
        forwarded[static_cast<size_t>(chunk)] = mb;
        output_unsent = virtual_stage < last_virtual;
        break;
      }
      case PipeOp::Backward: {
        flush(group);
        ZT_CHECK(!output_unsent, "pipeline: ", describe(instruction), " before the last forward's output was sent "
                 "(its recomputed forward may overwrite it)");
        double start = trace_ ? trace_->now() : 0.0;
        if (forwarded[static_cast<size_t>(chunk)] != mb) {
          work.forward(mb, chunk, input_of(work, chunk, mb, false));
          if (trace_) trace_->record("recompute", mb, std::exchange(start, trace_->now()));
        }
        const Tensor d_output = virtual_stage == last_virtual ? Tensor() : received_grads_.at({mb, virtual_stage});
        received_grads_.erase({mb, virtual_stage});
        // Interleaved chunks complete a unit's gradient out of micro-batch order: reduce after backward.
        input_grad = work.backward(mb, chunk, d_output, !tied_ && chunks_ == 1);
        if (trace_) trace_->record("backward", mb, start);
        forwarded[static_cast<size_t>(chunk)] = -1;
        break;
      }
      case PipeOp::ReduceTiedGrads:
        flush(group);
        reduce_tied_grads();
        break;
      case PipeOp::ReduceGrads:
        flush(group);
        work.reduce();
        break;
      case PipeOp::OptimizerStep:
        work.update();
        share_tied_params();
        break;
    }
  }
  post_group(group);
  flush(group);
  ZT_CHECK(posted_.empty(), "pipeline: ", posted_.size(), " messages posted and not waited for at the step's end");
  received_grads_.clear();
  grads_received_ = 0;
  if (trace_) trace_->end_step();
}

ZeroEngine::GradientCheck PipeEngine::combine(const ZeroEngine::GradientCheck& stage_check) {
  // Every rank of a stage holds the stage's figures: replica 0 speaks for it.
  double values[2] = {replica_ == 0 ? stage_check.norm * stage_check.norm : 0.0, stage_check.overflow ? 1.0 : 0.0};
  world_.all_reduce_scalars(values);
  return {std::sqrt(values[0]), values[1] > 0.0};
}

// One micro-batch's forward through this rank's chunks (virtual stages stage, P + stage, ...):
// each receives its input from the previous virtual stage's rank (the first reads the tokens)
// and sends its output to the next one's. Every rank of the replica walks the virtual stages in
// increasing order and every message joins two consecutive ones, so the two ranks of a message
// always meet: no deadlock on a blocking transport (NCCL's one stream included).
void PipeEngine::forward_only(std::span<CausalLM* const> chunks, const BatchTensors& batch,
                              const DropoutContext& dropout) {
  const int stages = topology_.stages(), last_virtual = stages * chunks_ - 1;
  const int64_t rows = batch.batch * batch.seq;
  for (int chunk = 0; chunk < chunks_; ++chunk) {
    const int virtual_stage = chunk * stages + stage_;
    Tensor input;  // [B*T, C]; empty on the first virtual stage
    if (virtual_stage > 0) {
      Buffer& buffer = inputs_.at(static_cast<size_t>(chunk * input_slots_));  // (no step is in flight)
      ensure_buffer(buffer, backend_, rows * hidden_, dtype_);
      input = buffer.view(dtype_, {rows, hidden_});
      world_.recv_async(input, rank_of_virtual(virtual_stage - 1))->wait();
    }
    const Tensor output = chunks[static_cast<size_t>(chunk)]->forward_stage(batch, dropout, input);
    if (virtual_stage < last_virtual) world_.send_async(output, rank_of_virtual(virtual_stage + 1))->wait();
  }
}

EvalResult PipeEngine::evaluate(std::span<CausalLM* const> chunks, const TokenDataset& data, int64_t micro_batch,
                                Communicator& replicas) {
  ZT_CHECK(static_cast<int>(chunks.size()) == chunks_, "pipeline evaluation: ", chunks.size(), " model chunks, the "
           "schedule has ", chunks_);
  ZT_CHECK(replicas.size() == topology_.replicas() && replicas.rank() == replica_, "pipeline evaluation: the "
           "communicator is not this stage's data-parallel group (rank ", replicas.rank(), " of ", replicas.size(),
           ", replica ", replica_, " of ", topology_.replicas(), ")");
  const bool last_stage = stage_ + 1 == topology_.stages();
  // The head is on the last virtual stage: the last stage's last chunk.
  std::array<double, 3> sums = eval_sums(
      *chunks.front(), last_stage ? chunks.back() : nullptr, data, micro_batch, replicas, backend_,
      [&](const MicroBatch&, const BatchTensors& batch, const DropoutContext& no_dropout) {
        forward_only(chunks, batch, no_dropout);
      });
  world_.all_reduce_scalars(sums);  // each replica's last stage
  return eval_result_of(sums);
}

void PipeEngine::combine_sums(std::span<double> sums) {
  ZT_CHECK(sums.size() == 4, "PipeEngine::combine_sums: ", sums.size(), " sums, not 4");
  const bool speaks = replica_ == 0;
  const bool last_stage = stage_ + 1 == topology_.stages();
  sums[0] = speaks && last_stage ? sums[0] : 0.0;  // the loss: the head's stage computes it
  sums[1] = speaks && stage_ == 0 ? sums[1] : 0.0;  // tokens: every stage sees the same micro-batches
  sums[2] = speaks && stage_ == 0 ? sums[2] : 0.0;
  sums[3] = speaks ? sums[3] : 0.0;                 // FLOPs: each stage's own units
  world_.all_reduce_scalars(sums);
}

}  // namespace zt
