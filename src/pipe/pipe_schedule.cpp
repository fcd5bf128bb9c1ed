// The three schedules: each rank's order of forward and backward work (which micro-batch, which
// chunk), then every work item expanded into its instructions (pipe_schedule.h).
#include "pipe/pipe_schedule.h"

#include <algorithm>
#include <optional>

#include "core/error.h"

namespace zt {

namespace {

// One forward or backward of one micro-batch through one chunk of a rank.
struct Work {
  bool forward;
  int micro_batch;
  int chunk;
};

// GPipe: all forwards, then all backwards, micro-batch by micro-batch.
std::vector<Work> gpipe_order(int micro_batches) {
  std::vector<Work> order;
  for (int mb = 0; mb < micro_batches; ++mb) order.push_back({true, mb, 0});
  for (int mb = 0; mb < micro_batches; ++mb) order.push_back({false, mb, 0});
  return order;
}

// 1F1B for `rank` of `ranks`: P - rank - 1 warm-up forwards (the micro-batches that fill the
// pipeline behind it), then one forward and one backward alternately, then the last backwards.
std::vector<Work> one_f_one_b_order(int rank, int ranks, int micro_batches) {
  const int warmup = std::min(ranks - rank - 1, micro_batches);
  std::vector<Work> order;
  for (int mb = 0; mb < warmup; ++mb) order.push_back({true, mb, 0});
  for (int i = 0; i + warmup < micro_batches; ++i) {
    order.push_back({true, warmup + i, 0});
    order.push_back({false, i, 0});
  }
  for (int mb = micro_batches - warmup; mb < micro_batches; ++mb) order.push_back({false, mb, 0});
  return order;
}

// Interleaved 1F1B (Megatron-LM's order): the k-th forward of a rank takes micro-batch
// (k / (P V)) P + k % P through chunk (k / P) % V, so P micro-batches go through chunk 0, then
// the same P through chunk 1, ...; the k-th backward takes the same micro-batch through the
// chunks in reverse.
Work interleaved_forward(int k, int ranks, int chunks) {
  return {true, k / (ranks * chunks) * ranks + k % ranks, k / ranks % chunks};
}
Work interleaved_backward(int k, int ranks, int chunks) {
  return {false, k / (ranks * chunks) * ranks + k % ranks, chunks - 1 - k / ranks % chunks};
}

// The slots of rank `rank` under Megatron-LM's interleaved schedule, which both list builders
// below (grouped, overlapped) walk: slot j runs forward j (interleaved_forward) and backward
// j - warmup (interleaved_backward), each if in range; virtual stage = chunk x ranks + rank.
struct InterleavedSlots {
  InterleavedSlots(int this_rank, int rank_count, int chunk_count, int micro_batches)
      : rank(this_rank), ranks(rank_count), chunks(chunk_count), total(micro_batches * chunk_count),
        last_stage(rank_count * chunk_count - 1),
        warmup(2 * (rank_count - this_rank - 1) + (chunk_count - 1) * rank_count) {}
  int stage_of(const Work& work) const { return work.chunk * ranks + rank; }
  bool forward_in(int slot) const { return slot >= 0 && slot < total; }
  bool backward_in(int slot) const { return slot - warmup >= 0 && slot - warmup < total; }
  Work forward(int slot) const { return interleaved_forward(slot, ranks, chunks); }
  Work backward(int slot) const { return interleaved_backward(slot - warmup, ranks, chunks); }

  int rank, ranks, chunks;
  int total;       // forwards (and backwards) of the rank: M x V
  int last_stage;  // P x V - 1
  int warmup;      // forwards before the first backward: 2 (P - rank - 1) + (V - 1) P
};

// The interleaved schedule as Megatron-LM runs it on NCCL: a rank's work goes in slots, slot j
// holding its forward j (j < M V) and then its backward j - W (0 <= j - W < M V), W = 2 (P - rank
// - 1) + (V - 1) P its warm-up (every chunk fed before the first backward arrives; a slot past the
// forwards and before the backwards is empty, where Megatron's warm-up is cut at M V). After each
// slot, and before the first, one batched exchange: the slot's two sends (its forward's
// activation, its backward's gradient) and the next slot's two receives (its forward's input, its
// backward's output gradient), as Megatron's send_forward_backward_recv_forward_backward.
// Deadlock-free by construction: give rank r's exchange after slot j the tick j + r. A message
// is sent and received at the same tick (forward k runs in slot k on every rank: its activation
// leaves rank r at tick k + r and enters rank r + 1 before its slot k, at tick k - 1 + r + 1, or
// rank 0 before slot k + P when it wraps to the next chunk; backward i runs in slot W_r + i and
// W_{r-1} = W_r + 2, which gives the gradients the same), and each rank's ticks increase. So
// every exchange waits only for its neighbours' exchanges of the same tick, which they reach
// once all earlier ticks completed: by induction on the tick, none waits forever. Exchanges
// with nothing between them (around an empty slot) are one run of instructions, which the
// engine sends as one group of ticks t..t': still no deadlock, since the stopped group with the
// smallest last tick could only wait for a rank stopped at a group whose last tick is smaller.
std::vector<PipeInstruction> interleaved_schedule(int rank, int ranks, int chunks, int micro_batches) {
  const InterleavedSlots slots(rank, ranks, chunks, micro_batches);
  std::vector<PipeInstruction> out;
  // The exchange after slot `slot` (-1: before the first): its sends, then the next slot's receives.
  auto exchange = [&](int slot) {
    if (slots.forward_in(slot)) {
      const Work f = slots.forward(slot);
      if (slots.stage_of(f) < slots.last_stage)
        out.push_back({PipeOp::SendActivation, f.micro_batch, slots.stage_of(f)});
    }
    if (slots.backward_in(slot)) {
      const Work b = slots.backward(slot);
      if (slots.stage_of(b) > 0) out.push_back({PipeOp::SendGrad, b.micro_batch, slots.stage_of(b)});
    }
    const Work next_forward = slots.forward(slot + 1);
    const bool feeds_forward = slots.forward_in(slot + 1);
    if (feeds_forward && slots.stage_of(next_forward) > 0)
      out.push_back({PipeOp::RecvActivation, next_forward.micro_batch, slots.stage_of(next_forward)});
    if (slots.backward_in(slot + 1)) {
      const Work b = slots.backward(slot + 1);
      if (slots.stage_of(b) < slots.last_stage)
        out.push_back({PipeOp::RecvGrad, b.micro_batch, slots.stage_of(b)});
    }
    if (feeds_forward && slots.stage_of(next_forward) == 0)  // after the run of messages: it is not one
      out.push_back({PipeOp::LoadMicroBatch, next_forward.micro_batch, 0});
  };
  exchange(-1);
  for (int slot = 0; slot < slots.warmup + slots.total; ++slot) {
    if (slots.forward_in(slot)) {
      const Work f = slots.forward(slot);
      out.push_back({PipeOp::Forward, f.micro_batch, slots.stage_of(f)});
    }
    if (slots.backward_in(slot)) {
      const Work b = slots.backward(slot);
      out.push_back({PipeOp::Backward, b.micro_batch, slots.stage_of(b)});
    }
    exchange(slot);
  }
  return out;
}

// The overlapped form of the interleaved schedule (pipe_schedule.h: Megatron-LM's
// overlap_p2p_comm): the exchange after slot j of interleaved_schedule split into a forward group,
// posted right after forward j (send its activation, receive forward j + 1's input), and a
// backward group, posted right after backward j - W (send its input gradient, receive backward
// j - W + 1's output gradient). The first backward's output gradient, which the grouped form
// receives after slot W - 1, is a group of its own posted at the start of slot W. A group is
// waited for just before the computation that needs its receive, and always before the next
// group of its kind (which reuses its send buffer), or at the end; so a Wait or a computation
// separates any two groups, and each run of messages is one group.
// Deadlock-free on one stream (NCCL runs a rank's groups one after the other): label each message
// (tick, kind), its tick the one the grouped form exchanges it at (interleaved_schedule: the
// same at both ends) and its kind F (activation) or B (gradient). Forward j's group holds labels
// (j + r, F) only, backward i's (W + i + r, B) only (the exchange after slot W + i receives the
// next slot's gradient), the first gradient's group (W - 1 + r, B): every group one label, both
// ends of a message in groups of the same label, and each rank posts its groups in increasing
// label order, (t, F) < (t, B) < (t + 1, F) (slot W's first-gradient group follows forward
// W - 1's or, with fewer forwards than W, the last forward's, and precedes forward W's). Take
// the group of smallest label that never completes: it is posted (else its rank stopped earlier,
// at a Wait for a group of smaller label), it runs (else one of smaller label before it on its
// stream never completes), and so does each partner group of the same label for the same
// reasons, so it completes: a contradiction.
std::vector<PipeInstruction> interleaved_overlapped(int rank, int ranks, int chunks, int micro_batches) {
  const InterleavedSlots slots(rank, ranks, chunks, micro_batches);
  using Message = std::optional<PipeInstruction>;
  // Slot `slot`'s forward's received input and sent activation, its backward's received output
  // gradient and sent input gradient (none past the ends of the pipeline or outside the slots).
  auto input_of = [&](int slot) -> Message {
    const Work f = slots.forward(slot);
    if (!slots.forward_in(slot) || slots.stage_of(f) == 0) return std::nullopt;
    return PipeInstruction{PipeOp::RecvActivation, f.micro_batch, slots.stage_of(f)};
  };
  auto activation_of = [&](int slot) -> Message {
    const Work f = slots.forward(slot);
    if (slots.stage_of(f) == slots.last_stage) return std::nullopt;
    return PipeInstruction{PipeOp::SendActivation, f.micro_batch, slots.stage_of(f)};
  };
  auto output_grad_of = [&](int slot) -> Message {
    const Work b = slots.backward(slot);
    if (!slots.backward_in(slot) || slots.stage_of(b) == slots.last_stage) return std::nullopt;
    return PipeInstruction{PipeOp::RecvGrad, b.micro_batch, slots.stage_of(b)};
  };
  auto input_grad_of = [&](int slot) -> Message {
    const Work b = slots.backward(slot);
    if (slots.stage_of(b) == 0) return std::nullopt;
    return PipeInstruction{PipeOp::SendGrad, b.micro_batch, slots.stage_of(b)};
  };
  std::vector<PipeInstruction> out;
  Message forward_group, backward_group;  // the group of each kind posted and not waited for: its first message
  auto wait_for = [&](Message& group) {
    if (group) out.push_back({PipeOp::Wait, group->micro_batch, group->virtual_stage, group->op});
    group.reset();
  };
  auto post = [&](Message& group, const Message& send, const Message& receive) {
    wait_for(group);
    for (const Message& message : {send, receive})
      if (message) {
        out.push_back(*message);
        if (!group) group = message;
      }
  };
  post(forward_group, std::nullopt, input_of(0));
  for (int slot = 0; slot < slots.warmup + slots.total; ++slot) {
    if (slot == slots.warmup) {  // the first backward's output gradient, after every forward group of smaller tick
      wait_for(forward_group);
      post(backward_group, std::nullopt, output_grad_of(slot));
    }
    if (slots.forward_in(slot)) {
      wait_for(forward_group);
      const Work f = slots.forward(slot);
      if (slots.stage_of(f) == 0) out.push_back({PipeOp::LoadMicroBatch, f.micro_batch, 0});
      out.push_back({PipeOp::Forward, f.micro_batch, slots.stage_of(f)});
      post(forward_group, activation_of(slot), input_of(slot + 1));
    }
    if (slots.backward_in(slot)) {
      wait_for(backward_group);
      const Work b = slots.backward(slot);
      out.push_back({PipeOp::Backward, b.micro_batch, slots.stage_of(b)});
      post(backward_group, input_grad_of(slot), output_grad_of(slot + 1));
    }
  }
  wait_for(forward_group);
  wait_for(backward_group);
  return out;
}

// The overlapped form of GPipe (pipe_schedule.h): each phase (the forwards, then the backwards)
// moves its messages one way along the chain (forwards from stage 0, backwards from the last
// stage), so a rank posts the receive of its next computation of the phase right before the
// running one (after waiting for that one's own), and its send right after the computation that
// produced it (from the send buffer of its kind, waited for before the next send reuses it). A
// phase ends by waiting for its last send: its first computation of the next phase needs a
// receive the next stage sends only after that send (posted before it, the receive would sit on
// the stream in front of the send that the next stage waits for: a deadlock). Every message is a
// group of its own (a Wait or a computation separates any two), in stream order
// [recv j + 1] [send j] [recv j + 2] [send j + 1] ...
// Deadlock-free on one stream: label forward j's activation from rank r by the tick j + r and
// backward i's gradient from rank r by T + i + (P - 1 - r), T = M + P (above every forward
// tick): a message has one tick at both ends, each rank posts its messages in non-decreasing
// tick order, and within a tick its receive before its send (forward: receive j + 1 has tick
// (j + 1) + (r - 1), send j tick j + r; backward the same from the last rank). A message of tick
// t from rank r waits, on its two streams and at the Waits before its posting, only for messages
// of smaller ticks and for the receive of tick t on its sender's stream, the message of tick t
// one rank nearer the phase's source (which has no receive): induction on (tick, distance from
// the source) shows every message completes.
std::vector<PipeInstruction> gpipe_overlapped(int rank, int ranks, int micro_batches) {
  std::vector<PipeInstruction> out;
  using Message = std::optional<PipeInstruction>;
  auto wait_for = [&](const Message& message) {
    if (message) out.push_back({PipeOp::Wait, message->micro_batch, message->virtual_stage, message->op});
  };
  auto push = [&](const Message& message) {
    if (message) out.push_back(*message);
  };
  for (const bool forward : {true, false}) {
    // Micro-batch mb's received input (forward) or output gradient, and its sent output or input gradient.
    auto received = [&](int mb) -> Message {
      if (mb >= micro_batches || (forward ? rank == 0 : rank == ranks - 1)) return std::nullopt;
      return PipeInstruction{forward ? PipeOp::RecvActivation : PipeOp::RecvGrad, mb, rank};
    };
    auto sent = [&](int mb) -> Message {
      if (mb < 0 || (forward ? rank == ranks - 1 : rank == 0)) return std::nullopt;
      return PipeInstruction{forward ? PipeOp::SendActivation : PipeOp::SendGrad, mb, rank};
    };
    push(received(0));
    for (int mb = 0; mb < micro_batches; ++mb) {
      wait_for(received(mb));
      push(received(mb + 1));
      if (forward && rank == 0) out.push_back({PipeOp::LoadMicroBatch, mb, 0});
      out.push_back({forward ? PipeOp::Forward : PipeOp::Backward, mb, rank});
      wait_for(sent(mb - 1));
      push(sent(mb));
    }
    wait_for(sent(micro_batches - 1));  // before the next phase's first receive
  }
  return out;
}

// A work item's instructions on `rank`: what feeds it, the compute, what it passes on.
void expand(const Work& work, int rank, int ranks, int virtual_stages, std::vector<PipeInstruction>& out) {
  const int stage = work.chunk * ranks + rank;
  const int mb = work.micro_batch;
  if (work.forward) {
    out.push_back({stage == 0 ? PipeOp::LoadMicroBatch : PipeOp::RecvActivation, mb, stage});
    out.push_back({PipeOp::Forward, mb, stage});
    if (stage + 1 < virtual_stages) out.push_back({PipeOp::SendActivation, mb, stage});
  } else {
    if (stage + 1 < virtual_stages) out.push_back({PipeOp::RecvGrad, mb, stage});
    out.push_back({PipeOp::Backward, mb, stage});
    if (stage > 0) out.push_back({PipeOp::SendGrad, mb, stage});
  }
}

// The posted-ahead form of a rank's list (pipe_schedule.h): the same computations in the same
// order, each message posted as early as its buffers allow and completed by a Wait as late as
// they allow. Computation j's receive is posted right after computation j - 2 (before j - 1 runs)
// and waited for right before j. Its send is posted right after it, from the rank's send buffer
// of its kind (the engine copies the chunk's output or input gradient there, since the chunk's
// next computation overwrites them), and waited for right before the next send of its kind,
// which reuses that buffer, or at the end. The messages between two ranks keep the order of the
// grouped form (each rank's sends and receives in computation order).
std::vector<PipeInstruction> posted_ahead(const std::vector<PipeInstruction>& grouped, int last_stage) {
  std::vector<PipeInstruction> computations;
  for (const PipeInstruction& instruction : grouped)
    if (instruction.op == PipeOp::Forward || instruction.op == PipeOp::Backward) computations.push_back(instruction);
  // The message a computation receives (its input or output gradient) and the one it sends.
  auto received_by = [&](const PipeInstruction& c) -> std::optional<PipeInstruction> {
    const bool forward = c.op == PipeOp::Forward;
    if (forward ? c.virtual_stage == 0 : c.virtual_stage == last_stage) return std::nullopt;
    return PipeInstruction{forward ? PipeOp::RecvActivation : PipeOp::RecvGrad, c.micro_batch, c.virtual_stage};
  };
  auto sent_by = [&](const PipeInstruction& c) -> std::optional<PipeInstruction> {
    const bool forward = c.op == PipeOp::Forward;
    if (forward ? c.virtual_stage == last_stage : c.virtual_stage == 0) return std::nullopt;
    return PipeInstruction{forward ? PipeOp::SendActivation : PipeOp::SendGrad, c.micro_batch, c.virtual_stage};
  };
  auto wait_for = [](const PipeInstruction& message) {
    return PipeInstruction{PipeOp::Wait, message.micro_batch, message.virtual_stage, message.op};
  };
  std::vector<PipeInstruction> out;
  std::optional<PipeInstruction> unfinished[2];  // the last send of each kind (activation, gradient)
  auto post_receive_of = [&](size_t j) {
    if (j >= computations.size()) return;
    if (const auto receive = received_by(computations[j])) out.push_back(*receive);
  };
  post_receive_of(0);
  post_receive_of(1);
  for (size_t j = 0; j < computations.size(); ++j) {
    const PipeInstruction& c = computations[j];
    if (const auto receive = received_by(c)) out.push_back(wait_for(*receive));
    if (c.op == PipeOp::Forward && c.virtual_stage == 0) out.push_back({PipeOp::LoadMicroBatch, c.micro_batch, 0});
    out.push_back(c);
    if (const auto send = sent_by(c)) {
      std::optional<PipeInstruction>& previous = unfinished[send->op == PipeOp::SendGrad];
      if (previous) out.push_back(wait_for(*previous));
      out.push_back(*send);
      previous = send;
    }
    post_receive_of(j + 2);
  }
  for (const auto& send : unfinished)
    if (send) out.push_back(wait_for(*send));
  return out;
}

void check_shape(PipeScheduleKind kind, const PipeScheduleShape& shape) {
  const std::string name = pipe_schedule_name(kind);
  ZT_CHECK(shape.ranks >= 1, "pipeline: ", shape.ranks, " stages (--pipeline-stages must be at least 1)");
  ZT_CHECK(shape.micro_batches >= 1, "pipeline: ", shape.micro_batches,
           " micro-batches per step (gradient_accumulation_steps must be at least 1)");
  if (kind != PipeScheduleKind::Interleaved) {
    ZT_CHECK(kind != PipeScheduleKind::OneFOneB || shape.form != PipeExchangeForm::Overlapped, "pipeline: the ", name,
             " schedule has no overlapped form (its receives feed the very next computation; posted earlier they "
             "deadlock on NCCL's one stream: docs/pipeline.md)");
    ZT_CHECK(shape.chunks == 1, "pipeline: the ", name, " schedule runs one model chunk per rank, not ", shape.chunks,
             " (virtual stages need the interleaved schedule)");
    return;
  }
  ZT_CHECK(shape.chunks >= 2, "pipeline: the interleaved schedule needs at least 2 model chunks per rank, not ",
           shape.chunks, " (with 1 it is 1f1b)");
  ZT_CHECK(shape.micro_batches % shape.ranks == 0, "pipeline: the interleaved schedule takes the micro-batches ",
           shape.ranks, " at a time (one per stage): gradient_accumulation_steps ", shape.micro_batches,
           " must be a multiple of the ", shape.ranks, " pipeline stages");
}

}  // namespace

PipeScheduleKind parse_pipe_schedule(const std::string& name, const std::string& where) {
  if (name == "gpipe") return PipeScheduleKind::GPipe;
  if (name == "1f1b") return PipeScheduleKind::OneFOneB;
  if (name == "interleaved") return PipeScheduleKind::Interleaved;
  fail(where, ": unknown pipeline schedule '", name, "' (gpipe, 1f1b or interleaved)");
}

std::string pipe_schedule_name(PipeScheduleKind kind) {
  switch (kind) {
    case PipeScheduleKind::GPipe: return "gpipe";
    case PipeScheduleKind::OneFOneB: return "1f1b";
    case PipeScheduleKind::Interleaved: return "interleaved";
  }
  return "?";
}

PipeExchangeForm pipe_exchange_form(PipeScheduleKind kind, bool exchanges_independent) {
  if (exchanges_independent) return PipeExchangeForm::PostedAhead;
  return kind == PipeScheduleKind::OneFOneB ? PipeExchangeForm::Grouped : PipeExchangeForm::Overlapped;
}

std::vector<std::vector<PipeInstruction>> make_pipe_schedule(PipeScheduleKind kind, const PipeScheduleShape& shape) {
  check_shape(kind, shape);
  const int virtual_stages = shape.ranks * shape.chunks;
  std::vector<std::vector<PipeInstruction>> schedules(static_cast<size_t>(shape.ranks));
  for (int rank = 0; rank < shape.ranks; ++rank) {
    std::vector<PipeInstruction>& out = schedules[static_cast<size_t>(rank)];
    if (kind == PipeScheduleKind::Interleaved) {
      out = shape.form == PipeExchangeForm::Overlapped
                ? interleaved_overlapped(rank, shape.ranks, shape.chunks, shape.micro_batches)
                : interleaved_schedule(rank, shape.ranks, shape.chunks, shape.micro_batches);
    } else if (kind == PipeScheduleKind::GPipe && shape.form == PipeExchangeForm::Overlapped) {
      out = gpipe_overlapped(rank, shape.ranks, shape.micro_batches);
    } else {
      const std::vector<Work> order = kind == PipeScheduleKind::GPipe
                                          ? gpipe_order(shape.micro_batches)
                                          : one_f_one_b_order(rank, shape.ranks, shape.micro_batches);
      for (const Work& work : order) expand(work, rank, shape.ranks, virtual_stages, out);
    }
    if (shape.form == PipeExchangeForm::PostedAhead) out = posted_ahead(out, virtual_stages - 1);
    if (shape.tied_ends) out.push_back({PipeOp::ReduceTiedGrads});
    out.push_back({PipeOp::ReduceGrads});
    out.push_back({PipeOp::OptimizerStep});
  }
  return schedules;
}

std::string describe(const PipeInstruction& instruction) {
  static const char* const names[] = {"LoadMicroBatch", "RecvActivation", "Forward", "SendActivation", "RecvGrad",
                                      "Backward", "SendGrad", "Wait", "ReduceTiedGrads", "ReduceGrads",
                                      "OptimizerStep"};
  const std::string name = names[static_cast<int>(instruction.op)];
  if (instruction.micro_batch < 0) return name;
  const std::string waited = instruction.op == PipeOp::Wait ? cat(names[static_cast<int>(instruction.waited)], " ") : "";
  return cat(name, "(", waited, "mb ", instruction.micro_batch, ", vs ", instruction.virtual_stage, ")");
}

}  // namespace zt
