// Pipeline schedules as data (issue 32): a schedule is, per pipeline rank, the ordered list of
// instructions that rank runs in one optimizer step; an engine executes them and nothing else
// decides the order. The same idea as DeepSpeed's pipe/schedule.py (a schedule yields
// instructions, the engine runs them), written from the schedules' definitions:
//   GPipe (Huang et al. 2019): every micro-batch's forward, then every backward (reversed order).
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs P - s - 1 warm-up forwards, then
//     alternates one forward and one backward, then drains the remaining backwards; at most P - s
//     micro-batches' activations are alive on stage s instead of all M.
//   Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each rank holds V model chunks
//     (virtual stages chunk * P + rank); forwards go through the chunks in groups of P
//     micro-batches, which divides the bubble by V at the price of V times the messages. Its
//     lists are Megatron's batched exchanges (a forward-backward slot's two sends, then the next
//     slot's two receives, adjacent: one NCCL group), deadlock-free by construction
//     (pipe_schedule.cpp).
// Terms: P pipeline ranks (stages of the physical pipeline), V chunks per rank (1 unless
// interleaved), S = P * V virtual stages, M micro-batches per step (DeepSpeed's
// gradient_accumulation_steps). Virtual stage v runs on rank v % P as its chunk v / P.
// The forms of a schedule (PipeExchangeForm), the same computations in the same order (so the
// same numbers):
//   grouped (NCCL, whose exchanges run one after the other on one stream): each run of adjacent
//     Send/Recv instructions is one exchange, completed before the next computation;
//   posted ahead (MPI, whose messages complete independently): every Send/Recv only posts its
//     message, and a Wait completes it: the receives a computation needs are posted before the
//     computation before it runs (one computation ahead) and waited for just before it; a send is
//     posted right after the computation that produced it, from a send buffer of its kind
//     (activation or gradient: the engine copies the chunk's output or input gradient there,
//     which the chunk's next computation overwrites), and waited for just before the next send of
//     its kind reuses that buffer, or at the step's end. Megatron-LM's overlap_p2p_comm, one step
//     further;
//   overlapped (NCCL, interleaved and GPipe): for the interleaved schedule Megatron-LM's
//     overlap_p2p_comm. The grouped form's batched exchange after a slot is split in two groups: after
//     forward j, {send j's activation, receive forward j + 1's input}; after backward i, {send
//     i's input gradient, receive backward i + 1's output gradient}. Each run of adjacent Send/Recv
//     instructions is one exchange, posted without waiting; a Wait completes the exchange that
//     holds its message, just before the computation that needs the exchange's receive (the
//     forward group's transfer runs on NCCL's stream while the slot's backward computes, the
//     backward group's while the next forward does). Sends go from the send buffers of the
//     posted-ahead form. For GPipe, whose phases each move their messages one way along the
//     chain: every message a group of its own, the receive of a phase's next computation posted
//     right before the running one (after waiting for that one's own), the send right after the
//     computation that produced it (from the send buffers, waited for before the next send of its
//     kind), each phase's last send waited for before the next phase's first receive is posted.
//     Both deadlock-free on one stream by construction (pipe_schedule.cpp); 1F1B has no such form
//     (docs/pipeline.md: its receives feed the very next computation, and posting them earlier
//     deadlocks on one stream).
// On one serial stream the posted-ahead order deadlocks (docs/pipeline.md); simulate_schedule
// (pipe_simulation.h) checks each form under its transport.
#pragma once
#include <string>
#include <vector>

namespace zt {

enum class PipeOp {
  LoadMicroBatch,  // the first virtual stage reads micro-batch `micro_batch`'s tokens
  RecvActivation,  // from virtual stage `virtual_stage - 1`: the input of this chunk's forward
  Forward,         // the chunk's forward (on the last virtual stage: with the loss)
  SendActivation,  // to virtual stage `virtual_stage + 1`
  RecvGrad,        // from virtual stage `virtual_stage + 1`: the gradient of this chunk's output
  Backward,        // the chunk's backward (on the last virtual stage: from the loss)
  SendGrad,        // to virtual stage `virtual_stage - 1`: the gradient of this chunk's input
  Wait,            // posted ahead, overlapped: completes the posted `waited` (Send/Recv) of the same micro-batch
                   // and stage (overlapped: the whole exchange that holds it)
  ReduceTiedGrads, // sum the tied embedding's gradient between the first and the last stage
  ReduceGrads,     // the data-parallel reduction of this rank's gradients (ZeRO's strategy)
  OptimizerStep,   // the update (after the global norm and overflow check over all stages)
};

struct PipeInstruction {
  PipeOp op;
  int micro_batch = -1;    // -1 for the step-level instructions
  int virtual_stage = -1;  // the chunk's virtual stage; -1 for the step-level instructions
  PipeOp waited = PipeOp::Wait;  // Wait only: which message it completes (Wait: none)

  bool operator==(const PipeInstruction&) const = default;
};

enum class PipeScheduleKind { GPipe, OneFOneB, Interleaved };

// How a schedule's messages are posted and completed (above).
enum class PipeExchangeForm { Grouped, PostedAhead, Overlapped };

struct PipeScheduleShape {
  int ranks = 1;          // P
  int chunks = 1;         // V (model chunks per rank): > 1 only for the interleaved schedule
  int micro_batches = 1;  // M
  // Whether the first and last virtual stages share tied parameters (OPT's, Qwen2's tied
  // embedding): every rank then runs ReduceTiedGrads (a no-op on the ranks that hold neither end).
  bool tied_ends = false;
  // The form of its messages (above): posted ahead for transports whose messages complete
  // independently (MPI); grouped (1F1B) or overlapped (interleaved, GPipe) on NCCL's one stream.
  PipeExchangeForm form = PipeExchangeForm::Grouped;
};

// "gpipe", "1f1b", "interleaved" -> the kind; anything else is an error naming `where`.
PipeScheduleKind parse_pipe_schedule(const std::string& name, const std::string& where);
std::string pipe_schedule_name(PipeScheduleKind kind);

// The form an engine runs `kind` in: posted ahead where the communicator's exchanges complete
// independently (Communicator::exchanges_independent: MPI), else (NCCL) overlapped for the
// interleaved schedule and GPipe, grouped for 1F1B.
PipeExchangeForm pipe_exchange_form(PipeScheduleKind kind, bool exchanges_independent);

// The schedule of every rank (index = rank), after checking the shape: P >= 1, M >= 1, V == 1
// unless interleaved, V >= 2 and M a multiple of P when interleaved (Megatron's condition: its
// forward order takes the micro-batches P at a time), the overlapped form not for 1F1B.
std::vector<std::vector<PipeInstruction>> make_pipe_schedule(PipeScheduleKind kind, const PipeScheduleShape& shape);

// "Forward(mb 3, vs 1)", "Wait(RecvGrad mb 3, vs 1)", for messages and tests.
std::string describe(const PipeInstruction& instruction);

}  // namespace zt
