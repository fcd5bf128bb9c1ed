// The pipeline engine (issue 32, docs/pipeline.md): executes this rank's instruction list of a
// pipeline schedule (pipe/pipe_schedule.h) in each optimizer step, and nothing else decides the
// order. Rank r runs stage r / D of replica r % D (pipe/pipeline_topology.h); its model holds
// only the stage's units (ModelOptions::first_unit, end_unit; the interleaved schedule: V chunks
// of units, virtual stages chunk x P + stage, one model per chunk) and its ZeRO engine reduces
// over the stage's data-parallel group. The engine:
//   - sends and receives the activations [B*T, C] and their gradients on the world communicator,
//     in one of the schedule's forms (pipe_schedule.h), by what the communicator can do
//     (Communicator::exchanges_independent, pipe_exchange_form):
//       posted ahead (MPI, host-staged MPI): each Send/Recv one exchange_async of its own, posted
//       where the list says and completed at its Wait: a computation's receive is posted before
//       the computation before it runs, into a buffer that computation does not use (1F1B keeps
//       one stage input more, min(P - stage + 1, M), and received gradients alternate between two
//       buffers); a send is copied into the send buffer of its kind (activation, gradient) and
//       completed only before the next send of its kind reuses it: the `Posted` transport of
//       pipe/pipe_simulation.h;
//       overlapped (NCCL, the interleaved schedule and GPipe): each run of adjacent Send/Recv
//       instructions (interleaved: a forward's or a backward's group, Megatron-LM's
//       overlap_p2p_comm; GPipe: one message) one exchange_async, posted at the next instruction
//       that is no message and completed at the Wait for one of its messages, just before the
//       computation that needs its receive: the `Stream` transport of pipe/pipe_simulation.h
//       (NCCL's one stream). Sends go from the send buffers; received gradients need one buffer
//       interleaved (the next is posted after the backward that reads the last), two for GPipe
//       (posted before it);
//       grouped (NCCL, 1F1B, whose exchanges run one after the other on one stream, where
//       receives posted ahead deadlock): each run of adjacent Send/Recv instructions one exchange_async
//       (one NCCL group), completed before the next computation: the `Grouped` transport, under
//       which the three schedules cannot deadlock (the interleaved schedule's runs are Megatron-
//       LM's batched exchanges, deadlock-free by construction: pipe_schedule.cpp, and the
//       simulator's baseline for the overlapped form). Every form sends a forward's output before
//       the next computation, which may overwrite it;
//   - keeps each micro-batch's stage input until its backward and recomputes the stage's forward
//     before a backward whose forward was not the stage's last one (GPipe everywhere, 1F1B
//     before the last stage): the model keeps one micro-batch's activations, the stage the
//     inputs of the micro-batches in flight (M buffers for GPipe, min(P - stage, M) for 1F1B, one
//     more posted ahead). Dropout masks are keyed by the tokens' row ids, so the recomputed
//     forward is the same forward;
//   - keeps a tied embedding (OPT's head reads the token table: DeepSpeed's TiedLayerSpec) on the
//     first stage and a copy on the last (run_assembly.h StageUnits): at ReduceTiedGrads the last
//     stage sends its copy's gradient to the first, which adds it to its own, and zeroes it (so
//     the global norm counts the tie once, as DeepSpeed's ds_pipe_replicated); after the
//     optimizer step the first stage sends the updated table to the last. The ZeRO reduction
//     then runs after backward (not during the last one), so ZeRO-2, which reduces during every
//     backward, is refused with a trainable tie;
//   - makes one loss scale and one gradient norm over all stages (combine): the squared norms of
//     the stages summed and the overflow flag maxed over every rank, so an overflow anywhere
//     skips the step everywhere and clipping uses the global norm; the loss comes from the last
//     stage, the token counts from the first (combine_sums).
#pragma once
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "comm/communicator.h"
#include "model/config.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "pipe/pipe_schedule.h"
#include "pipe/pipeline_topology.h"
#include "train/evaluation.h"
#include "train/pipe_trace.h"
#include "train/run_assembly.h"
#include "train/step_runner.h"
#include "train/train_config.h"

namespace zt {

// The refusals of a pipeline run (config.pipeline.enabled()), each naming what does not combine
// with --pipeline-stages and why; nothing without a pipeline.
void check_pipeline_run(const TrainConfig& config, const ModelConfig& model_config, int world_size,
                        const Optimizer& optimizer);

class PipeEngine final : public PipelineStage {
 public:
  // `world`: every rank's communicator (the activations' point-to-point traffic and the
  // cross-stage sums); `hidden_size`: C, the activations' width; `dtype`: their dtype (the
  // compute dtype); `tied_across_stages`: the model ties parameters of its first and last units
  // (its schedule then sums their gradients: ReduceTiedGrads); `exchanges_independent`: the
  // communicator's (world.exchanges_independent() in a run, the run's value in the memory model),
  // which picks the schedule's form (pipe_exchange_form: above).
  PipeEngine(const TrainConfig& config, const PipelineTopology& topology, int rank, Communicator& world,
             Backend& backend, int64_t hidden_size, DType dtype, bool tied_across_stages, bool exchanges_independent);

  // After the assembly: the stage's store and its parameters tied across stages.
  void attach(ParamStore& store, const StageUnits& stage);

  void run_step(StageWork& work) override;
  ZeroEngine::GradientCheck combine(const ZeroEngine::GradientCheck& stage_check) override;
  void combine_sums(std::span<double> sums) override;

  // Evaluation over the pipeline (train --eval-data, between steps): forward passes only, each
  // micro-batch through the virtual stages one after the other (forward_only); each replica
  // evaluates its own records (for_each_eval_micro_batch over `replicas`, the stage's
  // data-parallel group), the last stage sums the losses, and the sums go over every rank; the
  // result is a run without a pipeline's (train/evaluation.h). A rank moves on to the next
  // micro-batch once its output is received, so with one chunk per rank the stages run
  // consecutive micro-batches at once (docs/pipeline.md). `chunks`: this rank's models, chunk order.
  EvalResult evaluate(std::span<CausalLM* const> chunks, const TokenDataset& data, int64_t micro_batch,
                      Communicator& replicas);

  int stage() const { return stage_; }
  // The instruction timeline of every step (pipe_trace.h); nullptr: none (the memory model's engine).
  void set_trace(std::unique_ptr<PipeTrace> trace) { trace_ = std::move(trace); }

 private:
  // The pending group: a run of adjacent Send/Recv instructions of the schedule, one exchange.
  struct Group {
    std::vector<Transfer> transfers;
    std::vector<std::tuple<PipeOp, int, int>> messages;  // (op, mb, vs) of each transfer
  };
  void flush(Group& group);       // grouped: the group's exchange, waited for at once
  void post_group(Group& group);  // posted ahead, overlapped: the group's exchange, left to a Wait
  // A Send/Recv instruction's transfer: into the pending group (grouped, overlapped: sent at the
  // next computation, or at the next instruction that is no message), or posted now as an exchange
  // of its own that its Wait completes (posted ahead).
  void post(const PipeInstruction& instruction, Transfer transfer, Group& group);
  void complete(const PipeInstruction& wait);  // Wait: the posted exchange of its message (and its group's)
  Tensor to_send(Tensor tensor, int kind);     // posted ahead, overlapped: a copy in send_buffers_[kind]
  Tensor receive_grad_into(StageWork& work, int micro, int virtual_stage);  // RecvGrad's buffer
  void forward_only(std::span<CausalLM* const> chunks, const BatchTensors& batch, const DropoutContext& dropout);
  void reduce_tied_grads();   // ReduceTiedGrads
  void share_tied_params();   // after OptimizerStep
  Tensor input_of(StageWork& work, int chunk, int micro, bool for_receive);  // [B*T, C]
  int rank_of_virtual(int virtual_stage) const;  // this replica's rank of a virtual stage

  const PipelineTopology topology_;
  int rank_, stage_, replica_;
  int chunks_ = 1;        // V: model chunks per rank (virtual stage = chunk x P + stage)
  int micro_batches_ = 1;  // M
  int input_slots_ = 1;    // stage inputs kept per chunk: min(P - stage (+ 1 posted ahead), M) for 1F1B, else M
  PipeExchangeForm form_ = PipeExchangeForm::Grouped;  // the schedule's form: posted ahead (MPI), grouped or overlapped (NCCL)
  Communicator& world_;
  Backend& backend_;
  int64_t hidden_;
  DType dtype_;
  std::vector<PipeInstruction> schedule_;  // this rank's instructions of one step
  std::vector<Buffer> inputs_;             // [V x slots]: micro-batch k's input [B*T, C] in slot k % slots (not the first virtual stage's)
  Buffer output_grads_[2];                 // [B*T, C] each: received gradients of the output (the first grad_buffers_)
  int grad_buffers_ = 1;                   // 2 posted ahead and GPipe overlapped (receive_grad_into), else 1
  int grads_received_ = 0;                 // RecvGrads this step: the i-th goes to output_grads_[i % grad_buffers_]
  std::map<std::pair<int, int>, Tensor> received_grads_;  // (micro-batch, virtual stage) -> its gradient's view
  Buffer send_buffers_[2];                 // posted ahead, overlapped: [B*T, C] each, the activation and the gradient sent last
  struct Posted {
    Pending exchange;
    double bytes_sent = 0.0;  // for the trace
  };
  // Posted ahead, overlapped: (op, mb, vs) -> its exchange (shared by the messages of one group).
  std::map<std::tuple<PipeOp, int, int>, std::shared_ptr<Posted>> posted_;
  ParamStore* store_ = nullptr;
  std::vector<std::string> tied_copies_, tied_originals_;  // trainable ones only (StageUnits)
  bool tied_ = false;                      // the model has a trainable tie across stages (on any stage)
  Buffer tied_grad_;                       // a received tied gradient (the store's grad dtype)
  std::unique_ptr<PipeTrace> trace_;       // ZT_PIPE_TRACE's timeline, or nullptr
};

}  // namespace zt
