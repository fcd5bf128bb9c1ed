// The three schedules: each rank's order of forward and backward work (which micro-batch, which
// chunk), then every work item expanded into its instructions (pipe_schedule.h).
#include "pipe/pipe_schedule.h"

#include <algorithm>

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
// chunks in reverse. Warm-up: 2 (P - rank - 1) + (V - 1) P forwards (every chunk of the rank
// fed before its first backward arrives), at most all M V.
std::vector<Work> interleaved_order(int rank, int ranks, int chunks, int micro_batches) {
  const int total = micro_batches * chunks;
  const int group = ranks * chunks;
  auto micro_batch_of = [&](int k) { return k / group * ranks + k % ranks; };
  auto forward = [&](int k) { return Work{true, micro_batch_of(k), k / ranks % chunks}; };
  auto backward = [&](int k) { return Work{false, micro_batch_of(k), chunks - 1 - k / ranks % chunks}; };
  const int warmup = std::min(2 * (ranks - rank - 1) + (chunks - 1) * ranks, total);
  std::vector<Work> order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int i = 0; i + warmup < total; ++i) {
    order.push_back(forward(warmup + i));
    order.push_back(backward(i));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
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

void check_shape(PipeScheduleKind kind, const PipeScheduleShape& shape) {
  const std::string name = pipe_schedule_name(kind);
  ZT_CHECK(shape.ranks >= 1, "pipeline: ", shape.ranks, " stages (--pipeline-stages must be at least 1)");
  ZT_CHECK(shape.micro_batches >= 1, "pipeline: ", shape.micro_batches,
           " micro-batches per step (gradient_accumulation_steps must be at least 1)");
  if (kind != PipeScheduleKind::Interleaved) {
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

std::vector<std::vector<PipeInstruction>> make_pipe_schedule(PipeScheduleKind kind, const PipeScheduleShape& shape) {
  check_shape(kind, shape);
  const int virtual_stages = shape.ranks * shape.chunks;
  std::vector<std::vector<PipeInstruction>> schedules(static_cast<size_t>(shape.ranks));
  for (int rank = 0; rank < shape.ranks; ++rank) {
    std::vector<Work> order;
    switch (kind) {
      case PipeScheduleKind::GPipe: order = gpipe_order(shape.micro_batches); break;
      case PipeScheduleKind::OneFOneB: order = one_f_one_b_order(rank, shape.ranks, shape.micro_batches); break;
      case PipeScheduleKind::Interleaved:
        order = interleaved_order(rank, shape.ranks, shape.chunks, shape.micro_batches);
        break;
    }
    std::vector<PipeInstruction>& out = schedules[static_cast<size_t>(rank)];
    for (const Work& work : order) expand(work, rank, shape.ranks, virtual_stages, out);
    if (shape.tied_ends) out.push_back({PipeOp::ReduceTiedGrads});
    out.push_back({PipeOp::ReduceGrads});
    out.push_back({PipeOp::OptimizerStep});
  }
  return schedules;
}

std::string describe(const PipeInstruction& instruction) {
  static const char* const names[] = {"LoadMicroBatch", "RecvActivation", "Forward", "SendActivation", "RecvGrad",
                                      "Backward", "SendGrad", "ReduceTiedGrads", "ReduceGrads", "OptimizerStep"};
  const std::string name = names[static_cast<int>(instruction.op)];
  if (instruction.micro_batch < 0) return name;
  return cat(name, "(mb ", instruction.micro_batch, ", vs ", instruction.virtual_stage, ")");
}

}  // namespace zt
