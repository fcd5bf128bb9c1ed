// Unit tests of the pipeline schedules (pipe/pipe_schedule.h) run against each other by
// pipe/pipe_simulation.h: for GPipe and 1F1B over a grid of P and M the step's bubble is exactly
// (P - 1) / (M + P - 1) and the activations alive are M (GPipe) and P - rank (1F1B); interleaved
// 1F1B completes without deadlock for V = 2, 3 with theory's bubble (P - 1) / (V M + P - 1), below
// 1F1B's; bad shapes are refused; and the simulator catches the
// mutants an engine would hang or compute garbage on (a missing send, a backward before its
// forward, a forward run twice, a rank running another rank's stage, messages between two ranks
// sent out of the order they are received in); and under NCCL's grouped transport GPipe, 1F1B and
// the interleaved schedule's batched exchanges run while blocking sends deadlock 1F1B and interleaved;
// the posted-ahead lists (MPI) run with the theoretical bubble, overlap their messages with the
// computations, and deadlock on one serial stream (why NCCL keeps 1F1B grouped); the overlapped
// interleaved and GPipe lists (NCCL) run on one serial stream (the Stream transport) for every
// shape with theory's bubble, below the grouped lists' with latency; the engine
// (train/pipe_engine.h) on a recording communicator posts and waits where the lists say, sends
// copies, and receives into buffers the running computation does not use.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "comm/null_communicator.h"
#include "pipe/pipe_schedule.h"
#include "pipe/pipe_simulation.h"
#include "pipe/pipeline_topology.h"
#include "test_util.h"
#include "train/pipe_engine.h"

namespace {

using zt::PipeInstruction;
using zt::PipeOp;
using zt::PipeScheduleKind;
using zt::PipeScheduleShape;
using Schedules = std::vector<std::vector<PipeInstruction>>;

PipeScheduleShape shape_of(int ranks, int micro_batches, int chunks = 1) {
  PipeScheduleShape shape;
  shape.ranks = ranks;
  shape.micro_batches = micro_batches;
  shape.chunks = chunks;
  return shape;
}

std::string joined(const std::vector<std::string>& events) {
  std::string out;
  for (const std::string& event : events) out += event + " ";
  return out;
}

bool is_message(PipeOp op) {
  return op == PipeOp::SendActivation || op == PipeOp::SendGrad || op == PipeOp::RecvActivation || op == PipeOp::RecvGrad;
}

// Removes the last instruction of `rank` that is `op` (a mutant schedule).
void erase_last(Schedules& schedules, int rank, PipeOp op) {
  auto& list = schedules[static_cast<size_t>(rank)];
  const auto found = std::find_if(list.rbegin(), list.rend(), [&](const PipeInstruction& i) { return i.op == op; });
  BOOST_REQUIRE(found != list.rend());
  list.erase(std::next(found).base());
}

// What a PipeEngine did, in order: "F<mb>" / "B<mb>" a computation, "post" / "wait" an exchange
// (its transfers in `exchanges`, by post number).
struct EngineLog {
  std::vector<std::string> events;
  std::vector<std::vector<zt::Transfer>> exchanges;
  std::vector<std::vector<float>> sent;  // per exchange: the first send's values when posted
};

// A null communicator (two ranks that never talk) whose exchanges are recorded in `log`.
class RecordingCommunicator final : public zt::Communicator {
 public:
  RecordingCommunicator(int rank, EngineLog& log) : inner_(zt::make_null_communicator(rank, 2)), log_(log) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return 2; }
  int local_rank() const override { return rank(); }
  int local_size() const override { return 2; }
  int nodes() const override { return 1; }
  std::string name() const override { return "recording"; }
  zt::Pending all_reduce_sum_async(zt::Tensor data) override { return inner_->all_reduce_sum_async(data); }
  zt::Pending reduce_scatter_sum_async(zt::Tensor out, zt::Tensor in) override { return inner_->reduce_scatter_sum_async(out, in); }
  zt::Pending all_gather_async(zt::Tensor out, zt::Tensor in) override { return inner_->all_gather_async(out, in); }
  zt::Pending all_to_all_async(zt::Tensor out, zt::Tensor in) override { return inner_->all_to_all_async(out, in); }
  void broadcast(zt::Tensor, int) override {}
  void barrier() override {}
  void all_reduce_scalars(std::span<double>) override {}
  double all_reduce_max(double value) override { return value; }
  std::vector<std::string> all_gather_strings(const std::string& mine) override { return {mine, mine}; }
  std::unique_ptr<zt::Communicator> split(int, int) override { return zt::make_null_communicator(0, 1); }
  zt::Pending exchange_async(std::span<const zt::Transfer> transfers) override {
    const size_t id = log_.exchanges.size();
    log_.exchanges.emplace_back(transfers.begin(), transfers.end());
    std::vector<float> sent;
    for (const zt::Transfer& transfer : transfers)
      if (transfer.send && sent.empty()) sent.assign(transfer.tensor.f32(), transfer.tensor.f32() + transfer.tensor.numel());
    log_.sent.push_back(std::move(sent));
    log_.events.push_back(zt::cat("post ", id));
    return std::make_unique<Recorded>(log_, id);
  }

 private:
  struct Recorded final : zt::PendingCollective {
    Recorded(EngineLog& into, size_t number) : log(into), id(number) {}
    ~Recorded() override { Recorded::wait(); }
    void wait() override {
      if (!waited) log.events.push_back(zt::cat("wait ", id));
      waited = true;
    }
    bool done() const override { return waited; }
    EngineLog& log;
    size_t id;
    bool waited = false;
  };
  std::unique_ptr<zt::Communicator> inner_;
  EngineLog& log_;
};

// A stage's work of 4 rows x 8 (fp32) per micro-batch: its forward's output holds 1000 + mb, its
// backward's input gradient 2000 + mb, each in one buffer the next computation overwrites.
class RecordingWork final : public zt::StageWork {
 public:
  RecordingWork(zt::Backend& backend, EngineLog& log) : output_(backend, 32 * 4), grad_(backend, 32 * 4), log_(log) {}
  int64_t micro_batches() const override { return 4; }
  int64_t rows(int64_t) const override { return 4; }
  zt::Tensor forward(int64_t micro, int, zt::Tensor) override { return computed("F", micro, output_, 1000); }
  zt::Tensor backward(int64_t micro, int, zt::Tensor, bool) override { return computed("B", micro, grad_, 2000); }
  void reduce() override {}
  void update() override {}
  zt::Buffer output_, grad_;

 private:
  zt::Tensor computed(const char* what, int64_t micro, zt::Buffer& buffer, float base) {
    log_.events.push_back(zt::cat(what, micro));
    zt::Tensor out = buffer.view(zt::DType::F32, {4, 8});
    std::fill(out.f32(), out.f32() + 32, base + static_cast<float>(micro));
    return out;
  }
  EngineLog& log_;
};

// Stage `rank` of a 2-stage pipeline of 4 micro-batches (1F1B, GPipe, or interleaved with 2
// chunks), one step, on a communicator whose exchanges are independent (MPI: posted ahead) or not
// (NCCL: grouped 1F1B, overlapped GPipe and interleaved).
EngineLog run_engine(int rank, bool post_ahead, const char* schedule = "1f1b") {
  zt::TrainConfig config;
  config.pipeline.stages = 2;
  config.pipeline.schedule = schedule;
  config.pipeline.chunks = std::string(schedule) == "interleaved" ? 2 : 1;
  config.gradient_accumulation_steps = 4;
  EngineLog log;
  RecordingCommunicator world(rank, log);
  const std::unique_ptr<zt::Backend> backend = zt::make_cpu_backend();
  zt::PipeEngine engine(config, zt::PipelineTopology(2, 2), rank, world, *backend, 8, zt::DType::F32, false, post_ahead);
  RecordingWork work(*backend, log);
  engine.run_step(work);
  for (size_t k = 0; k < log.sent.size(); ++k)  // what was sent is a copy, not the buffer the next computation overwrites
    for (const zt::Transfer& transfer : log.exchanges[k])
      if (transfer.send && (post_ahead || std::string(schedule) != "1f1b"))
        BOOST_TEST((transfer.tensor.data != work.output_.data() && transfer.tensor.data != work.grad_.data()));
  return log;
}

size_t index_of(const std::vector<std::string>& events, const std::string& event) {
  const auto found = std::find(events.begin(), events.end(), event);
  BOOST_REQUIRE_MESSAGE(found != events.end(), event << " not in the engine's events");
  return static_cast<size_t>(found - events.begin());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pipe_schedule)

BOOST_AUTO_TEST_CASE(gpipe_and_1f1b_reach_the_theoretical_bubble) {
  for (PipeScheduleKind kind : {PipeScheduleKind::GPipe, PipeScheduleKind::OneFOneB})
    for (int ranks : {1, 2, 3, 4, 8})
      for (int micro_batches : {1, 2, 4, 8, 16}) {
        const PipeScheduleShape shape = shape_of(ranks, micro_batches);
        const zt::PipeSimulation sim = zt::simulate_pipe_schedule(zt::make_pipe_schedule(kind, shape), shape);
        const std::string what = zt::cat(zt::pipe_schedule_name(kind), " P=", ranks, " M=", micro_batches);
        BOOST_TEST(sim.bubble_fraction == zt::theoretical_bubble_fraction(kind, shape),
                   what << ": bubble " << sim.bubble_fraction << boost::test_tools::tolerance(1e-12));
        BOOST_TEST(sim.step_time == (micro_batches + ranks - 1) * 3.0, what << ": step time " << sim.step_time);
        BOOST_TEST(sim.activation_messages == micro_batches * (ranks - 1), what);
        BOOST_TEST(sim.gradient_messages == micro_batches * (ranks - 1), what);
        for (int rank = 0; rank < ranks; ++rank) {
          BOOST_TEST(sim.busy[static_cast<size_t>(rank)] == micro_batches * 3.0, what << " rank " << rank);
          const int alive = kind == PipeScheduleKind::GPipe ? micro_batches : std::min(ranks - rank, micro_batches);
          BOOST_TEST(sim.peak_in_flight[static_cast<size_t>(rank)] == alive, what << " rank " << rank << ": "
                                                                             << sim.peak_in_flight[static_cast<size_t>(rank)]
                                                                             << " activations alive");
        }
      }
}

BOOST_AUTO_TEST_CASE(interleaved_completes_and_shrinks_the_bubble) {
  for (int ranks : {2, 4})
    for (int chunks : {2, 3})
      for (int groups : {1, 2, 4}) {
        const PipeScheduleShape shape = shape_of(ranks, ranks * groups, chunks);
        const std::string what = zt::cat("interleaved P=", ranks, " V=", chunks, " M=", shape.micro_batches);
        const zt::PipeSimulation sim = zt::simulate_pipe_schedule(
            zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape), shape);
        const double theory = zt::theoretical_bubble_fraction(PipeScheduleKind::Interleaved, shape);
        // Chunks cost 1/V of a stage: the same model split finer.
        const zt::PipeCosts chunk_costs{1.0 / chunks, 2.0 / chunks, 0.0};
        const zt::PipeSimulation scaled = zt::simulate_pipe_schedule(
            zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape), shape, chunk_costs);
        const PipeScheduleShape flat = shape_of(ranks, shape.micro_batches);
        const zt::PipeSimulation one_f_one_b =
            zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, flat), flat);
        BOOST_TEST(scaled.bubble_fraction == sim.bubble_fraction, what << boost::test_tools::tolerance(1e-12));
        BOOST_TEST(sim.bubble_fraction == theory, what << ": bubble " << sim.bubble_fraction << " vs " << theory
                                                       << boost::test_tools::tolerance(1e-12));
        BOOST_TEST(sim.bubble_fraction < one_f_one_b.bubble_fraction, what << ": " << sim.bubble_fraction
                                                                           << " vs 1f1b "
                                                                           << one_f_one_b.bubble_fraction);
        BOOST_TEST(sim.activation_messages == shape.micro_batches * (ranks * chunks - 1), what);
        BOOST_TEST(sim.gradient_messages == shape.micro_batches * (ranks * chunks - 1), what);
      }
}

// NCCL's transport: GPipe's and 1F1B's adjacent sends and receives as one group each run without
// deadlock and with the same bubble; sent one by one, blocking, 1F1B deadlocks in its steady state
// (rank s sends an activation while rank s+1 sends a gradient), which is why the engine groups them.
// The interleaved lists batch each slot's two sends with the next slot's two receives (Megatron-LM's
// send_forward_backward_recv_forward_backward): grouped so, they run without deadlock and with the
// theoretical bubble (the test below).
BOOST_AUTO_TEST_CASE(grouped_sends_and_receives_run_where_blocking_ones_deadlock) {
  zt::PipeCosts grouped;
  grouped.transport = zt::PipeTransport::Grouped;
  for (PipeScheduleKind kind : {PipeScheduleKind::GPipe, PipeScheduleKind::OneFOneB})
    for (int ranks : {2, 3, 4, 8})
      for (int micro_batches : {1, 4, 8, 12}) {
        const PipeScheduleShape shape = shape_of(ranks, micro_batches);
        const std::string what = zt::cat(zt::pipe_schedule_name(kind), " P=", ranks, " M=", micro_batches, " grouped");
        const zt::PipeSimulation sim = zt::simulate_pipe_schedule(zt::make_pipe_schedule(kind, shape), shape, grouped);
        BOOST_TEST(sim.bubble_fraction == zt::theoretical_bubble_fraction(kind, shape),
                   what << ": bubble " << sim.bubble_fraction << boost::test_tools::tolerance(1e-12));
      }
  zt::PipeCosts blocking;
  blocking.transport = zt::PipeTransport::Blocking;
  const PipeScheduleShape shape = shape_of(2, 4);
  zt::test::check_error_mentions(
      [&] { zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape), shape, blocking); },
      {"deadlocks", "rank 0: waits at SendActivation", "rank 1: waits at SendGrad"});
  // GPipe never sends both ways at once: it runs even with blocking sends.
  BOOST_TEST(zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape), shape, blocking)
                 .bubble_fraction == zt::theoretical_bubble_fraction(PipeScheduleKind::GPipe, shape),
             boost::test_tools::tolerance(1e-12));
}

// The interleaved schedule on NCCL: each run of its messages (a slot's sends and the next slot's
// receives) is one group; every rank's groups meet their neighbours' (pipe_schedule.cpp: a
// message is sent and received at the same tick), so it completes, with the theoretical bubble,
// for P up to 8, V = 2, 3 and M = P, 2P, 4P (M = P: Megatron's all-warm-up case, empty slots).
// Issued one by one, blocking, the same lists deadlock: the batching is what makes them run.
BOOST_AUTO_TEST_CASE(interleaved_batched_exchanges_run_grouped) {
  zt::PipeCosts grouped;
  grouped.transport = zt::PipeTransport::Grouped;
  for (int ranks : {2, 3, 4, 8})
    for (int chunks : {2, 3})
      for (int groups : {1, 2, 4}) {
        const PipeScheduleShape shape = shape_of(ranks, ranks * groups, chunks);
        const std::string what = zt::cat("interleaved P=", ranks, " V=", chunks, " M=", shape.micro_batches, " grouped");
        const zt::PipeSimulation sim =
            zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape), shape, grouped);
        BOOST_TEST(sim.bubble_fraction == zt::theoretical_bubble_fraction(PipeScheduleKind::Interleaved, shape),
                   what << ": bubble " << sim.bubble_fraction << boost::test_tools::tolerance(1e-12));
      }
  zt::PipeCosts blocking;
  blocking.transport = zt::PipeTransport::Blocking;
  const PipeScheduleShape interleaved = shape_of(2, 4, 2);
  zt::test::check_error([&] {
    zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::Interleaved, interleaved), interleaved, blocking);
  }, "deadlocks");
  // At P = 2 both sends of a batched exchange go to the other rank, which receives the activation
  // first: rank 0 listing its gradient first would pair the wrong messages.
  Schedules swapped = zt::make_pipe_schedule(PipeScheduleKind::Interleaved, interleaved);
  auto& first = swapped[0];
  const auto pair = std::adjacent_find(first.begin(), first.end(), [](const PipeInstruction& a, const PipeInstruction& b) {
    return a.op == PipeOp::SendActivation && b.op == PipeOp::SendGrad;
  });
  BOOST_REQUIRE(pair != first.end());
  std::iter_swap(pair, std::next(pair));
  zt::test::check_error([&] { zt::simulate_pipe_schedule(swapped, interleaved, grouped); },
                        "(messages between two ranks arrive in the order sent)");
}

// The posted-ahead lists (MPI: every message its own request, completed by a Wait): for GPipe,
// 1F1B (V = 1) and interleaved (V = 2, 3), P = 2, 3, 4, 8 and M = P, 2P, 4P they run without
// deadlock with the theoretical bubble; each computation's receive is posted before the
// computation before it, each send right after its computation (and the Wait for its buffer); with a latency of 0.1 the
// interleaved bubble at P = 2, M = 8 is back at what sends posted ahead gave (0.081, V = 2; 0.082,
// V = 4), below the grouped lists' (0.124, 0.162). On one serial stream (NCCL's Grouped) the same
// lists deadlock: 1F1B's rank 0 waits for gradient 0 before it sends activation 1, which rank 1
// waits for before it sends gradient 0.
BOOST_AUTO_TEST_CASE(posted_ahead_lists_overlap_messages_with_computation_on_mpi) {
  zt::PipeCosts posted;
  posted.transport = zt::PipeTransport::Posted;
  for (int ranks : {2, 3, 4, 8})
    for (int chunks : {1, 2, 3})
      for (int groups : {1, 2, 4})
        for (PipeScheduleKind kind : chunks == 1 ? std::vector{PipeScheduleKind::GPipe, PipeScheduleKind::OneFOneB}
                                                 : std::vector{PipeScheduleKind::Interleaved}) {
          PipeScheduleShape shape = shape_of(ranks, ranks * groups, chunks);
          shape.form = zt::PipeExchangeForm::PostedAhead;
          const std::string what = zt::cat(zt::pipe_schedule_name(kind), " P=", ranks, " V=", chunks, " M=",
                                           shape.micro_batches, " posted ahead");
          const Schedules schedules = zt::make_pipe_schedule(kind, shape);
          const zt::PipeSimulation sim = zt::simulate_pipe_schedule(schedules, shape, posted);
          BOOST_TEST(sim.bubble_fraction == zt::theoretical_bubble_fraction(kind, shape),
                     what << ": bubble " << sim.bubble_fraction << boost::test_tools::tolerance(1e-12));
          BOOST_TEST(sim.activation_messages == shape.micro_batches * (ranks * chunks - 1), what);
          for (const auto& list : schedules) {  // receives one computation ahead, sends right after theirs
            std::vector<size_t> computations;
            for (size_t i = 0; i < list.size(); ++i)
              if (list[i].op == PipeOp::Forward || list[i].op == PipeOp::Backward) computations.push_back(i);
            for (size_t i = 0; i < list.size(); ++i) {
              const bool receive = list[i].op == PipeOp::RecvActivation || list[i].op == PipeOp::RecvGrad;
              const bool send = list[i].op == PipeOp::SendActivation || list[i].op == PipeOp::SendGrad;
              if (!receive && !send) continue;
              const PipeOp computed = list[i].op == PipeOp::RecvActivation || list[i].op == PipeOp::SendActivation
                                          ? PipeOp::Forward : PipeOp::Backward;
              const auto at = std::find(computations.begin(), computations.end(),
                  static_cast<size_t>(std::find(list.begin(), list.end(),
                      PipeInstruction{computed, list[i].micro_batch, list[i].virtual_stage}) - list.begin()));
              BOOST_REQUIRE(at != computations.end());
              if (receive && at != computations.begin()) BOOST_TEST(i < *std::prev(at), what << ": " << zt::describe(list[i]));
              if (send)  // after its computation, with at most the Wait that frees its send buffer between
                BOOST_TEST((i == *at + 1 || (i == *at + 2 && list[i - 1].op == PipeOp::Wait)),
                           what << ": " << zt::describe(list[i]));
            }
          }
        }
  const std::pair<int, double> old_bubbles[] = {{2, 0.0806}, {4, 0.0823}};  // BENCHMARKS.md, sends posted ahead
  for (const auto& [chunks, old_bubble] : old_bubbles) {
    PipeScheduleShape shape = shape_of(2, 8, chunks);
    const zt::PipeCosts grouped{1.0 / chunks, 2.0 / chunks, 0.1, zt::PipeTransport::Grouped};
    const double nccl = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape), shape,
                                                   grouped).bubble_fraction;
    shape.form = zt::PipeExchangeForm::PostedAhead;
    const zt::PipeCosts mpi{1.0 / chunks, 2.0 / chunks, 0.1, zt::PipeTransport::Posted};
    const double bubble = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape), shape,
                                                     mpi).bubble_fraction;
    BOOST_TEST(bubble <= old_bubble, "V=" << chunks << ": " << bubble);
    BOOST_TEST(bubble < nccl - 0.04, "V=" << chunks << ": " << bubble << " vs grouped " << nccl);
  }
  PipeScheduleShape shape = shape_of(2, 4);
  shape.form = zt::PipeExchangeForm::PostedAhead;
  zt::PipeCosts grouped;
  grouped.transport = zt::PipeTransport::Grouped;
  zt::test::check_error(
      [&] { zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape), shape, grouped); },
      "deadlocks");
}

// What the Posted transport catches in a posted-ahead list: a send whose Wait is gone (its buffer
// reused by the next send of its kind, or never completed), a receive whose Wait is gone (the
// computation runs on what has not arrived), a Wait for what was never posted.
BOOST_AUTO_TEST_CASE(the_simulator_catches_broken_posted_ahead_lists) {
  using zt::test::check_error;
  PipeScheduleShape shape = shape_of(2, 4);
  shape.form = zt::PipeExchangeForm::PostedAhead;
  zt::PipeCosts posted;
  posted.transport = zt::PipeTransport::Posted;
  const Schedules good = zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape);
  auto without_wait = [&](int rank, PipeOp waited, bool last) {
    Schedules broken = good;
    auto& list = broken[static_cast<size_t>(rank)];
    auto is_wait = [&](const PipeInstruction& i) { return i.op == PipeOp::Wait && i.waited == waited; };
    if (last) list.erase(std::next(std::find_if(list.rbegin(), list.rend(), is_wait)).base());
    else list.erase(std::find_if(list.begin(), list.end(), is_wait));
    return broken;
  };
  check_error([&] { zt::simulate_pipe_schedule(without_wait(0, PipeOp::SendActivation, false), shape, posted); },
              "reuses the send buffer of SendActivation(mb 0, vs 0)");
  check_error([&] { zt::simulate_pipe_schedule(without_wait(1, PipeOp::SendGrad, true), shape, posted); },
              "posted and never waited for");
  check_error([&] { zt::simulate_pipe_schedule(without_wait(1, PipeOp::RecvActivation, false), shape, posted); },
              "runs before its input was loaded or received");
  Schedules stray = good;
  stray[0].insert(stray[0].begin(), PipeInstruction{PipeOp::Wait, 0, 0, PipeOp::RecvGrad});
  check_error([&] { zt::simulate_pipe_schedule(stray, shape, posted); }, "waits for a message it has not posted");
}

// The engine runs the list as the list says (docs/pipeline.md): posted ahead, each message is an
// exchange of its own; stage 0's receive of micro-batch k's gradient is posted before the forward
// that precedes backward k and waited for after it; its sends carry the forward's output as it was
// (a copy: the next forward overwrites the output buffer before the send is waited for), and two
// gradients in flight land in different buffers; stage 1's inputs of consecutive micro-batches
// too. Grouped, every exchange is waited for before the next computation.
BOOST_AUTO_TEST_CASE(the_engine_posts_messages_ahead_or_groups_them) {
  const EngineLog first = run_engine(0, true), last = run_engine(1, true);
  const std::vector<std::string>& events = first.events;  // F0 F1 B0 F2 B1 F3 B2 B3
  for (const auto& [backward, before] : {std::pair{"B0", "F1"}, {"B1", "F2"}, {"B2", "F3"}, {"B3", "B2"}}) {
    size_t receive = 0;  // the exchange that receives this backward's gradient: the k-th receive
    for (int k = 0, seen = 0; k < static_cast<int>(first.exchanges.size()); ++k)
      if (!first.exchanges[static_cast<size_t>(k)][0].send && seen++ == backward[1] - '0') receive = static_cast<size_t>(k);
    BOOST_TEST(first.exchanges[receive].size() == 1u);
    BOOST_TEST(index_of(events, zt::cat("post ", receive)) < index_of(events, before), backward);
    BOOST_TEST(index_of(events, zt::cat("wait ", receive)) > index_of(events, before), backward);
    BOOST_TEST(index_of(events, zt::cat("wait ", receive)) < index_of(events, backward), backward);
  }
  std::vector<const void*> gradients, inputs;
  for (const auto& exchange : first.exchanges)
    if (!exchange[0].send) gradients.push_back(exchange[0].tensor.data);
  for (const auto& exchange : last.exchanges)
    if (!exchange[0].send) inputs.push_back(exchange[0].tensor.data);
  BOOST_REQUIRE(gradients.size() == 4u);
  BOOST_REQUIRE(inputs.size() == 4u);
  for (size_t k = 0; k + 1 < 4; ++k) {
    BOOST_TEST(gradients[k] != gradients[k + 1], "gradients " << k << ", " << k + 1 << " share a buffer");
    BOOST_TEST(inputs[k] != inputs[k + 1], "inputs " << k << ", " << k + 1 << " share a buffer");
  }
  int sends = 0;
  for (size_t k = 0; k < first.exchanges.size(); ++k)
    if (first.exchanges[k][0].send) {
      BOOST_TEST((first.sent[k] == std::vector<float>(32, 1000.0f + static_cast<float>(sends))),
                 "send " << k << " carries forward " << sends << "'s output");
      ++sends;
    }
  BOOST_TEST(sends == 4);
  // Grouped: nothing between an exchange's post and its wait.
  for (int rank : {0, 1}) {
    const EngineLog grouped = run_engine(rank, false);
    for (size_t k = 0; k < grouped.exchanges.size(); ++k)
      BOOST_TEST(index_of(grouped.events, zt::cat("wait ", k)) == index_of(grouped.events, zt::cat("post ", k)) + 1,
                 "rank " << rank << " exchange " << k);
  }
}

// The overlapped interleaved lists (NCCL: Megatron-LM's overlap_p2p_comm, a forward's and a
// backward's group posted after their computation on the rank's one stream): for P = 2, 3, 4, 8,
// V = 2, 3 and M = P, 2P, 4P they run without deadlock under the Stream transport (NCCL's serial
// stream) with the theoretical bubble, each group is one forward's or one backward's (at most a
// send and a receive of one kind), waited for just before the computation that needs its receive,
// and most groups have a computation between their posting and their Wait; with a latency of 0.1
// their bubble is below the grouped lists' (0.124, V = 2; 0.162, V = 4 at P = 2, M = 8).
BOOST_AUTO_TEST_CASE(overlapped_interleaved_lists_run_on_one_nccl_stream) {
  zt::PipeCosts stream;
  stream.transport = zt::PipeTransport::Stream;
  for (int ranks : {2, 3, 4, 8})
    for (int chunks : {2, 3})
      for (int groups : {1, 2, 4}) {
        PipeScheduleShape shape = shape_of(ranks, ranks * groups, chunks);
        shape.form = zt::PipeExchangeForm::Overlapped;
        const std::string what = zt::cat("interleaved P=", ranks, " V=", chunks, " M=", shape.micro_batches, " overlapped");
        const Schedules schedules = zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape);
        const zt::PipeSimulation sim = zt::simulate_pipe_schedule(schedules, shape, stream);
        BOOST_TEST(sim.bubble_fraction == zt::theoretical_bubble_fraction(PipeScheduleKind::Interleaved, shape),
                   what << ": bubble " << sim.bubble_fraction << boost::test_tools::tolerance(1e-12));
        BOOST_TEST(sim.activation_messages == shape.micro_batches * (ranks * chunks - 1), what);
        int overlapped = 0, posted = 0;
        for (const auto& list : schedules)
          for (size_t i = 0; i < list.size(); ++i) {
            if (!is_message(list[i].op) || (i > 0 && is_message(list[i - 1].op))) continue;
            ++posted;  // a group: [send] [receive], of one kind
            size_t end = i;
            while (end < list.size() && is_message(list[end].op)) ++end;
            const bool sends = list[i].op == PipeOp::SendActivation || list[i].op == PipeOp::SendGrad;
            const PipeInstruction* receive = sends ? (end - i == 2 ? &list[i + 1] : nullptr) : &list[i];
            BOOST_TEST((end - i <= 2 && (!receive || receive->op == (sends ? (list[i].op == PipeOp::SendGrad
                ? PipeOp::RecvGrad : PipeOp::RecvActivation) : receive->op))), what << ": " << zt::describe(list[i]));
            if (sends)  // right after the computation that produced it
              BOOST_TEST((i > 0 && list[i - 1].op == (list[i].op == PipeOp::SendGrad ? PipeOp::Backward : PipeOp::Forward) &&
                          list[i - 1].micro_batch == list[i].micro_batch), what << ": " << zt::describe(list[i]));
            const auto waited = std::find(list.begin() + static_cast<long>(end), list.end(),
                                          PipeInstruction{PipeOp::Wait, list[i].micro_batch, list[i].virtual_stage, list[i].op});
            BOOST_REQUIRE_MESSAGE(waited != list.end(), what << ": " << zt::describe(list[i]) << " never waited for");
            auto computation = [](const PipeInstruction& c) { return c.op == PipeOp::Forward || c.op == PipeOp::Backward; };
            if (receive) {  // waited for just before the computation it feeds
              const auto consumer = std::find_if(waited, list.end(), computation);
              BOOST_REQUIRE(consumer != list.end());
              BOOST_TEST((consumer->op == (receive->op == PipeOp::RecvGrad ? PipeOp::Backward : PipeOp::Forward) &&
                          consumer->micro_batch == receive->micro_batch &&
                          consumer->virtual_stage == receive->virtual_stage &&
                          std::none_of(waited + 1, consumer, [](const PipeInstruction& c) { return c.op == PipeOp::Wait; })),
                         what << ": " << zt::describe(*receive) << " feeds " << zt::describe(*consumer));
            }
            overlapped += std::any_of(list.begin() + static_cast<long>(end), waited, computation);
          }
        // M = P: the warm-up and the drain, which nothing overlaps, are most of the step.
        BOOST_TEST((groups == 1 ? overlapped >= ranks : 2 * overlapped > posted),
                   what << ": " << overlapped << " of " << posted << " groups overlap a computation");
      }
  const std::pair<int, double> grouped_bubbles[] = {{2, 0.1241}, {4, 0.1623}};  // BENCHMARKS.md, latency 0.1
  for (const auto& [chunks, grouped_bubble] : grouped_bubbles) {
    PipeScheduleShape shape = shape_of(2, 8, chunks);
    const zt::PipeCosts grouped{1.0 / chunks, 2.0 / chunks, 0.1, zt::PipeTransport::Grouped};
    const double before = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape),
                                                     shape, grouped).bubble_fraction;
    shape.form = zt::PipeExchangeForm::Overlapped;
    const zt::PipeCosts nccl{1.0 / chunks, 2.0 / chunks, 0.1, zt::PipeTransport::Stream};
    const double bubble = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape),
                                                     shape, nccl).bubble_fraction;
    BOOST_TEST(before == grouped_bubble, "V=" << chunks << boost::test_tools::tolerance(0.0005));
    BOOST_TEST(bubble < before - 0.02, "V=" << chunks << ": " << bubble << " vs grouped " << before);
  }
}

// The Stream transport is NCCL's serial stream: the posted-ahead 1F1B list (each message a group
// of its own, receives one computation ahead) deadlocks on it (docs/pipeline.md's example), a
// Wait gone lets a computation run on what has not arrived, and the overlapped interleaved list
// with rank 0's first gradient group posted one forward early (out of its label order) deadlocks.
BOOST_AUTO_TEST_CASE(the_stream_transport_is_one_serial_stream) {
  using zt::test::check_error;
  zt::PipeCosts stream;
  stream.transport = zt::PipeTransport::Stream;
  PipeScheduleShape ahead = shape_of(2, 4);
  ahead.form = zt::PipeExchangeForm::PostedAhead;
  check_error([&] { zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, ahead), ahead, stream); },
              "deadlocks");
  PipeScheduleShape shape = shape_of(2, 4, 2);
  shape.form = zt::PipeExchangeForm::Overlapped;
  const Schedules good = zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape);
  Schedules no_wait = good;
  auto& first = no_wait[1];
  first.erase(std::find_if(first.begin(), first.end(), [](const PipeInstruction& i) { return i.op == PipeOp::Wait; }));
  check_error([&] { zt::simulate_pipe_schedule(no_wait, shape, stream); }, "runs before its input was loaded or received");
  Schedules early = good;  // rank 0's first gradient receive, label (3, B), before forward 3's group, label (3, F)
  auto& list = early[0];
  const auto receive = std::find_if(list.begin(), list.end(), [](const PipeInstruction& i) { return i.op == PipeOp::RecvGrad; });
  const PipeInstruction moved = *receive;
  list.erase(receive);
  list.insert(std::find(list.begin(), list.end(), PipeInstruction{PipeOp::Forward, 1, 2}), moved);
  check_error([&] { zt::simulate_pipe_schedule(early, shape, stream); }, "deadlocks");
}

namespace {

// The engine runs `kind`'s overlapped list (P = 2, M = 4) on NCCL (a communicator whose exchanges
// are not independent): each run of messages is one exchange, posted at the next instruction and
// waited for at the list's Wait (so exactly the list's events), and its sends are copies of the
// forward's output and the backward's input gradient as computed.
void check_engine_runs_the_overlapped_list(PipeScheduleKind kind, const PipeScheduleShape& shape) {
  const Schedules lists = zt::make_pipe_schedule(kind, shape);
  for (int rank : {0, 1}) {
    const EngineLog log = run_engine(rank, false, zt::pipe_schedule_name(kind).c_str());
    std::vector<std::string> expected;
    std::vector<std::vector<PipeInstruction>> groups;  // the list's runs of messages
    const auto& list = lists[static_cast<size_t>(rank)];
    for (size_t i = 0; i < list.size(); ++i) {
      const PipeInstruction& c = list[i];
      const bool message = is_message(c.op);
      if (message && (i == 0 || !is_message(list[i - 1].op))) {
        groups.emplace_back();
        expected.push_back(zt::cat("post ", groups.size() - 1));
      }
      if (message) groups.back().push_back(c);
      if (c.op == PipeOp::Forward || c.op == PipeOp::Backward) expected.push_back(zt::cat(c.op == PipeOp::Forward ? "F" : "B", c.micro_batch));
      if (c.op == PipeOp::Wait)
        for (size_t g = 0; g < groups.size(); ++g)
          if (std::find(groups[g].begin(), groups[g].end(), PipeInstruction{c.waited, c.micro_batch, c.virtual_stage}) !=
              groups[g].end())
            expected.push_back(zt::cat("wait ", g));
    }
    std::vector<std::string> events;  // without the forwards recomputed right before their backward
    for (size_t k = 0; k < log.events.size(); ++k)
      if (!(log.events[k][0] == 'F' && k + 1 < log.events.size() && log.events[k + 1] == "B" + log.events[k].substr(1)))
        events.push_back(log.events[k]);
    BOOST_TEST(events == expected, "rank " << rank << ": " << joined(events) << " vs " << joined(expected));
    BOOST_REQUIRE(log.exchanges.size() == groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      BOOST_TEST(log.exchanges[g].size() == groups[g].size());
      const PipeInstruction& first = groups[g].front();
      if (first.op == PipeOp::SendActivation || first.op == PipeOp::SendGrad)  // as computed
        BOOST_TEST((log.sent[g] == std::vector<float>(32, (first.op == PipeOp::SendGrad ? 2000.0f : 1000.0f) +
                                                              static_cast<float>(first.micro_batch))),
                   "rank " << rank << " exchange " << g);
    }
  }
}

}  // namespace

// The engine runs the overlapped list on NCCL (a communicator whose exchanges are not
// independent): each run of messages is one exchange, posted at the next instruction and waited
// for at the list's Wait (so exactly the list's events), its sends are copies of the forward's
// output and the backward's input gradient as computed, and forward groups are waited for after
// the slot's backward.
BOOST_AUTO_TEST_CASE(the_engine_overlaps_the_interleaved_groups_on_nccl) {
  PipeScheduleShape shape = shape_of(2, 4, 2);
  shape.form = zt::PipeExchangeForm::Overlapped;
  check_engine_runs_the_overlapped_list(PipeScheduleKind::Interleaved, shape);
  const EngineLog first = run_engine(0, false, "interleaved");
  int overlapped = 0;  // exchanges with a computation between their posting and their wait
  for (size_t k = 0; k < first.exchanges.size(); ++k)
    overlapped += std::any_of(first.events.begin() + static_cast<long>(index_of(first.events, zt::cat("post ", k))),
                              first.events.begin() + static_cast<long>(index_of(first.events, zt::cat("wait ", k))),
                              [](const std::string& e) { return e[0] == 'F' || e[0] == 'B'; });
  BOOST_TEST(overlapped >= 4, overlapped << " of " << first.exchanges.size() << " exchanges overlap a computation");
}

// The overlapped GPipe lists (NCCL): each phase moves its messages one way along the chain, so
// every message is a group of its own, a receive is posted before the computation that precedes
// its consumer and waited for just before the consumer, and a send right after its computation
// (with at most the Wait for the previous send between). For P = 2, 3, 4, 8 and M = P, 2P, 4P
// they run without deadlock under the Stream transport (NCCL's serial stream) with theory's
// bubble; with a latency of 0.1 their bubble is the posted-ahead lists' (MPI) and well below the
// grouped lists' (P = 2, M = 32: 0.032 against 0.089). Posting the first backward's gradient
// receive before the last forward's send (one computation early) deadlocks: rank 1 needs that
// activation to produce the gradient, and the send waits on rank 0's stream behind the receive.
BOOST_AUTO_TEST_CASE(overlapped_gpipe_lists_run_on_one_nccl_stream) {
  zt::PipeCosts stream;
  stream.transport = zt::PipeTransport::Stream;
  for (int ranks : {2, 3, 4, 8})
    for (int groups : {1, 2, 4}) {
      PipeScheduleShape shape = shape_of(ranks, ranks * groups);
      shape.form = zt::PipeExchangeForm::Overlapped;
      const std::string what = zt::cat("gpipe P=", ranks, " M=", shape.micro_batches, " overlapped");
      const Schedules schedules = zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape);
      const zt::PipeSimulation sim = zt::simulate_pipe_schedule(schedules, shape, stream);
      BOOST_TEST(sim.bubble_fraction == zt::theoretical_bubble_fraction(PipeScheduleKind::GPipe, shape),
                 what << ": bubble " << sim.bubble_fraction << boost::test_tools::tolerance(1e-12));
      BOOST_TEST(sim.activation_messages == shape.micro_batches * (ranks - 1), what);
      BOOST_TEST(sim.gradient_messages == shape.micro_batches * (ranks - 1), what);
      for (const auto& list : schedules)
        for (size_t i = 0; i < list.size(); ++i) {
          if (!is_message(list[i].op)) continue;
          const std::string message = zt::cat(what, ": ", zt::describe(list[i]));
          BOOST_TEST(!is_message(list[i + 1].op), message << " shares a group");
          const bool forward = list[i].op == PipeOp::RecvActivation || list[i].op == PipeOp::SendActivation;
          const auto computation = std::find(list.begin(), list.end(), PipeInstruction{forward ? PipeOp::Forward
              : PipeOp::Backward, list[i].micro_batch, list[i].virtual_stage});
          BOOST_REQUIRE(computation != list.end());
          const auto at = static_cast<size_t>(computation - list.begin());
          if (list[i].op == PipeOp::SendActivation || list[i].op == PipeOp::SendGrad) {
            BOOST_TEST((i == at + 1 || (i == at + 2 && list[i - 1].op == PipeOp::Wait)), message);
            continue;
          }
          const auto waited = std::find(list.begin(), list.end(),
                                        PipeInstruction{PipeOp::Wait, list[i].micro_batch, list[i].virtual_stage, list[i].op});
          BOOST_REQUIRE(waited != list.end());
          const auto wait_at = static_cast<size_t>(waited - list.begin());
          // Waited for just before its consumer (at most the micro-batch's load between)...
          BOOST_TEST((wait_at < at && std::none_of(waited + 1, computation, [](const PipeInstruction& c) {
                        return c.op == PipeOp::Wait || c.op == PipeOp::Forward || c.op == PipeOp::Backward; })),
                     message);
          // ... and, but for a phase's first, posted before the computation before it.
          const bool first = list[i].micro_batch == 0;
          BOOST_TEST((first || std::any_of(list.begin() + static_cast<long>(i), waited, [&](const PipeInstruction& c) {
                        return c.op == (forward ? PipeOp::Forward : PipeOp::Backward); })),
                     message);
        }
    }
  for (const auto& [ranks, micro_batches] : {std::pair{2, 32}, {2, 8}, {4, 8}}) {
    PipeScheduleShape shape = shape_of(ranks, micro_batches);
    const zt::PipeCosts grouped{1.0, 2.0, 0.1, zt::PipeTransport::Grouped};
    const double before = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape), shape,
                                                     grouped).bubble_fraction;
    shape.form = zt::PipeExchangeForm::PostedAhead;
    const zt::PipeCosts mpi{1.0, 2.0, 0.1, zt::PipeTransport::Posted};
    const double posted = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape), shape,
                                                     mpi).bubble_fraction;
    shape.form = zt::PipeExchangeForm::Overlapped;
    const zt::PipeCosts nccl{1.0, 2.0, 0.1, zt::PipeTransport::Stream};
    const double bubble = zt::simulate_pipe_schedule(zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape), shape,
                                                     nccl).bubble_fraction;
    const std::string what = zt::cat("P=", ranks, " M=", micro_batches, ": ", bubble, " vs grouped ", before,
                                     ", posted ahead ", posted);
    BOOST_TEST(bubble < before - 0.025, what);
    BOOST_TEST(bubble <= posted + 1e-9, what);
    if (ranks == 2 && micro_batches == 32) BOOST_TEST(before == 0.0892, what << boost::test_tools::tolerance(0.001));
  }
  PipeScheduleShape shape = shape_of(2, 4);
  shape.form = zt::PipeExchangeForm::Overlapped;
  Schedules early = zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape);
  auto& list = early[0];  // rank 0's first gradient receive, posted before its last forward
  const auto receive = std::find_if(list.begin(), list.end(), [](const PipeInstruction& i) { return i.op == PipeOp::RecvGrad; });
  const PipeInstruction moved = *receive;
  list.erase(receive);
  list.insert(std::find(list.begin(), list.end(), PipeInstruction{PipeOp::Forward, 3, 0}), moved);
  zt::test::check_error([&] { zt::simulate_pipe_schedule(early, shape, stream); }, "deadlocks");
}

// The engine runs the overlapped GPipe list on NCCL as listed (check_engine_runs_the_overlapped_list);
// on stage 0 each gradient's receive is posted before the backward before its own and lands in
// another buffer than the previous gradient's, on stage 1 each input's before the forward before
// its own.
BOOST_AUTO_TEST_CASE(the_engine_overlaps_gpipe_on_nccl) {
  PipeScheduleShape shape = shape_of(2, 4);
  shape.form = zt::PipeExchangeForm::Overlapped;
  check_engine_runs_the_overlapped_list(PipeScheduleKind::GPipe, shape);
  for (int rank : {0, 1}) {
    const EngineLog log = run_engine(rank, false, "gpipe");
    std::vector<const void*> buffers;  // of the receives, in order
    for (size_t k = 0; k < log.exchanges.size(); ++k) {
      if (log.exchanges[k][0].send) continue;
      const int mb = static_cast<int>(buffers.size());
      buffers.push_back(log.exchanges[k][0].tensor.data);
      const char* computed = rank == 0 ? "B" : "F";
      if (mb > 0)
        BOOST_TEST(index_of(log.events, zt::cat("post ", k)) < index_of(log.events, zt::cat(computed, mb - 1)),
                   "rank " << rank << " receive " << mb);
      if (mb > 0) BOOST_TEST(buffers[static_cast<size_t>(mb)] != buffers[static_cast<size_t>(mb - 1)], "rank " << rank << " receive " << mb);
    }
    BOOST_TEST(buffers.size() == 4u);
  }
}

BOOST_AUTO_TEST_CASE(tied_ends_reduce_on_every_rank_before_the_step) {
  PipeScheduleShape shape = shape_of(3, 4);
  shape.tied_ends = true;
  const Schedules schedules = zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape);
  for (const auto& list : schedules) {
    BOOST_REQUIRE(list.size() >= 3);
    BOOST_TEST((list[list.size() - 3].op == PipeOp::ReduceTiedGrads));
    BOOST_TEST((list[list.size() - 2].op == PipeOp::ReduceGrads));
    BOOST_TEST((list.back().op == PipeOp::OptimizerStep));
  }
  BOOST_TEST(zt::simulate_pipe_schedule(schedules, shape).bubble_fraction ==
             zt::theoretical_bubble_fraction(PipeScheduleKind::OneFOneB, shape), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(latency_lengthens_the_step) {
  const PipeScheduleShape shape = shape_of(4, 8);
  const Schedules schedules = zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape);
  const double without = zt::simulate_pipe_schedule(schedules, shape).step_time;
  const double with = zt::simulate_pipe_schedule(schedules, shape, {1.0, 2.0, 0.25}).step_time;
  // At least the critical path's 2 (P - 1) hops: the first forward down and the last backward up.
  BOOST_TEST(with >= without + 2 * 3 * 0.25, "step time " << with << " with latency, " << without << " without");
}

BOOST_AUTO_TEST_CASE(bad_shapes_are_refused) {
  using zt::test::check_error;
  check_error([] { zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape_of(4, 6, 2)); },
              "must be a multiple of the 4 pipeline stages");
  check_error([] { zt::make_pipe_schedule(PipeScheduleKind::Interleaved, shape_of(2, 4, 1)); },
              "at least 2 model chunks");
  check_error([] { zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape_of(2, 4, 2)); },
              "virtual stages need the interleaved schedule");
  check_error([] { zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape_of(0, 4)); }, "at least 1");
  PipeScheduleShape overlapped = shape_of(2, 4);
  overlapped.form = zt::PipeExchangeForm::Overlapped;
  check_error([&] { zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, overlapped); },
              "the 1f1b schedule has no overlapped form");
  BOOST_TEST((zt::pipe_exchange_form(PipeScheduleKind::Interleaved, false) == zt::PipeExchangeForm::Overlapped));
  BOOST_TEST((zt::pipe_exchange_form(PipeScheduleKind::OneFOneB, false) == zt::PipeExchangeForm::Grouped));
  BOOST_TEST((zt::pipe_exchange_form(PipeScheduleKind::GPipe, false) == zt::PipeExchangeForm::Overlapped));
  BOOST_TEST((zt::pipe_exchange_form(PipeScheduleKind::GPipe, true) == zt::PipeExchangeForm::PostedAhead));
  BOOST_TEST((zt::pipe_exchange_form(PipeScheduleKind::Interleaved, true) == zt::PipeExchangeForm::PostedAhead));
  check_error([] { zt::make_pipe_schedule(PipeScheduleKind::GPipe, shape_of(2, 0)); }, "gradient_accumulation_steps");
  check_error([] { zt::parse_pipe_schedule("zb-h1", "--pipeline-schedule"); },
              "--pipeline-schedule: unknown pipeline schedule 'zb-h1' (gpipe, 1f1b or interleaved)");
  BOOST_TEST((zt::parse_pipe_schedule("1f1b", "x") == PipeScheduleKind::OneFOneB));
}

BOOST_AUTO_TEST_CASE(the_simulator_catches_broken_schedules) {
  using zt::test::check_error;
  using zt::test::check_error_mentions;
  const PipeScheduleShape shape = shape_of(3, 4);
  const Schedules good = zt::make_pipe_schedule(PipeScheduleKind::OneFOneB, shape);

  Schedules missing_send = good;
  erase_last(missing_send, 0, PipeOp::SendActivation);
  check_error_mentions([&] { zt::simulate_pipe_schedule(missing_send, shape); },
                       {"deadlocks", "rank 1: waits at RecvActivation(mb 3, vs 1)"});

  Schedules backward_first = good;  // the last stage: its first backward before its first forward
  auto& last = backward_first[2];
  const auto forward = std::find_if(last.begin(), last.end(), [](const PipeInstruction& i) { return i.op == PipeOp::Forward; });
  const auto backward = std::find_if(last.begin(), last.end(), [](const PipeInstruction& i) { return i.op == PipeOp::Backward; });
  std::iter_swap(forward, backward);
  check_error([&] { zt::simulate_pipe_schedule(backward_first, shape); }, "runs before its forward");

  Schedules twice = good;
  twice[1].insert(twice[1].begin() + 2, twice[1][1]);  // RecvActivation, Forward, Forward
  check_error([&] { zt::simulate_pipe_schedule(twice, shape); }, "runs twice");

  // Rank 0 sends micro-batch 1's activation before micro-batch 0's: fine with tags, wrong for
  // NCCL, whose messages between two ranks match in the order sent.
  const zt::PipeScheduleShape two = shape_of(2, 2);
  Schedules reordered = zt::make_pipe_schedule(PipeScheduleKind::GPipe, two);
  auto& first = reordered[0];  // Load 0, Forward 0, Send 0, Load 1, Forward 1, Send 1, ...
  const PipeInstruction send0 = first[2];
  first.erase(first.begin() + 2);
  first.insert(first.begin() + 5, send0);
  check_error([&] { zt::simulate_pipe_schedule(reordered, two); },
              "while the next message from rank 0 is the activation of micro-batch 1");

  Schedules misplaced = good;
  misplaced[1].insert(misplaced[1].begin(), PipeInstruction{PipeOp::Forward, 0, 2});
  check_error([&] { zt::simulate_pipe_schedule(misplaced, shape); }, "rank 1 runs Forward(mb 0, vs 2)");
}

BOOST_AUTO_TEST_SUITE_END()
