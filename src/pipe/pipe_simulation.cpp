// The simulation of pipe_simulation.h: every rank advances through its instructions while it
// can; a rank stops at a receive whose message was not sent yet and at a step-level instruction
// until every rank reached it. No rank able to move while one has instructions left = deadlock.
#include "pipe/pipe_simulation.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace zt {

namespace {

bool is_step_level(PipeOp op) {
  return op == PipeOp::ReduceTiedGrads || op == PipeOp::ReduceGrads || op == PipeOp::OptimizerStep;
}

bool is_message(PipeOp op) {
  return op == PipeOp::SendActivation || op == PipeOp::SendGrad || op == PipeOp::RecvActivation ||
         op == PipeOp::RecvGrad;
}

// (micro-batch, virtual stage)
using Slot = std::pair<int, int>;
// (is a gradient, micro-batch, sending virtual stage)
using MessageKey = std::tuple<bool, int, int>;

class Simulator {
 public:
  Simulator(const std::vector<std::vector<PipeInstruction>>& schedules, const PipeScheduleShape& shape,
            const PipeCosts& costs)
      : schedules_(schedules), shape_(shape), costs_(costs), stages_(shape.ranks * shape.chunks) {
    ZT_CHECK(static_cast<int>(schedules.size()) == shape.ranks, "pipeline simulation: ", schedules.size(),
             " schedules for ", shape.ranks, " ranks");
    ranks_.resize(schedules.size());
    result_.busy.assign(schedules.size(), 0.0);
    result_.peak_in_flight.assign(schedules.size(), 0);
  }

  PipeSimulation run() {
    bool first_barrier = true;
    while (!finished()) {
      bool moved = progress_streams();
      for (int rank = 0; rank < shape_.ranks; ++rank) moved = advance(rank) || moved;
      if (moved) continue;
      if (!all_at_same_step_level_instruction()) fail_deadlock();
      release_barrier(first_barrier);
      first_barrier = false;
    }
    check_complete();
    double busy = 0.0;
    for (double b : result_.busy) busy += b;
    result_.bubble_fraction =
        result_.step_time > 0.0 ? 1.0 - busy / (shape_.ranks * result_.step_time) : 0.0;
    return result_;
  }

 private:
  // A send or receive posted as part of a group (Grouped and Blocking transports).
  struct PostedOp {
    bool is_send;
    std::pair<int, int> channel;  // (from rank, to rank)
    size_t index;                 // its place among the channel's sends (or receives)
    MessageKey key;
    Slot slot;
  };
  // Stream: one group on a rank's stream.
  struct StreamGroup {
    std::vector<PostedOp> ops;
    double posted_at = 0.0;
    double done = -1.0;  // when it completed (-1: not yet)
  };
  struct RankState {
    size_t next = 0;       // index of the next instruction
    double clock = 0.0;
    int alive = 0;         // forwards whose backward has not run
    std::set<Slot> inputs;     // activations received or micro-batches loaded
    std::set<Slot> gradients;  // output gradients received
    std::vector<PostedOp> group;  // the group this rank waits at (posted), if any
    bool group_posted = false;
    size_t group_end = 0;
    std::set<size_t> pre_posted;  // Grouped: receives posted (and completed) ahead of their place
    std::map<std::tuple<PipeOp, int, int>, PostedOp> posted;  // Posted: (op, mb, vs) -> not waited for yet
    std::vector<StreamGroup> stream;  // Stream: the groups posted, in posting (= running) order
    size_t stream_head = 0;           // Stream: the first of them not completed
    std::map<std::tuple<PipeOp, int, int>, size_t> in_stream;  // Stream: (op, mb, vs) -> its group, until waited for
  };
  enum class GroupProgress { Blocked, Posted, Done };

  const PipeInstruction* next_of(int rank) const {
    const auto& schedule = schedules_[static_cast<size_t>(rank)];
    const size_t next = ranks_[static_cast<size_t>(rank)].next;
    return next < schedule.size() ? &schedule[next] : nullptr;
  }
  bool finished() const {
    for (int rank = 0; rank < shape_.ranks; ++rank)
      if (next_of(rank)) return false;
    return true;
  }

  // Runs `rank`'s instructions until it must wait; true when it ran (or posted) at least one.
  bool advance(int rank) {
    bool moved = false;
    while (const PipeInstruction* instruction = next_of(rank)) {
      if (is_step_level(instruction->op)) break;
      RankState& state = ranks_[static_cast<size_t>(rank)];
      if (state.pre_posted.count(state.next)) {  // received with an earlier group
        ++state.next;
        continue;
      }
      if (costs_.transport == PipeTransport::Stream && (is_message(instruction->op) || instruction->op == PipeOp::Wait)) {
        if (instruction->op == PipeOp::Wait) {
          check_placement(*instruction, rank);
          if (!wait_stream(*instruction, rank)) break;
          ++state.next;
        } else {
          post_stream_group(rank);
        }
        moved = true;
        continue;
      }
      if (costs_.transport == PipeTransport::Posted && (is_message(instruction->op) || instruction->op == PipeOp::Wait)) {
        check_placement(*instruction, rank);
        if (instruction->op == PipeOp::Wait) {
          if (!wait_posted(*instruction, rank)) break;
        } else {
          post_message(*instruction, rank);
        }
        ++state.next;
        moved = true;
        continue;
      }
      if (instruction->op == PipeOp::Wait) {  // the other transports complete messages themselves
        ++state.next;
        continue;
      }
      if (costs_.transport != PipeTransport::Buffered && is_message(instruction->op)) {
        const GroupProgress progress = advance_group(rank);
        moved = moved || progress != GroupProgress::Blocked;
        if (progress == GroupProgress::Done) continue;
        break;
      }
      check_placement(*instruction, rank);
      if (!execute(*instruction, rank)) break;
      ++ranks_[static_cast<size_t>(rank)].next;
      moved = true;
    }
    return moved;
  }

  void check_placement(const PipeInstruction& instruction, int rank) const {
    const int stage = instruction.virtual_stage;
    ZT_CHECK(instruction.micro_batch >= 0 && instruction.micro_batch < shape_.micro_batches && stage >= 0 &&
                 stage < stages_ && stage % shape_.ranks == rank,
             "pipeline schedule: rank ", rank, " runs ", describe(instruction), ", which is not one of its ",
             shape_.micro_batches, " micro-batches x its virtual stages (", stages_, " in all)");
  }

  // One instruction at the rank's clock; false (nothing done) when it must wait for a message.
  bool execute(const PipeInstruction& instruction, int rank) {
    RankState& state = ranks_[static_cast<size_t>(rank)];
    const Slot slot{instruction.micro_batch, instruction.virtual_stage};
    switch (instruction.op) {
      case PipeOp::LoadMicroBatch:
        expect(slot.second == 0, instruction, rank, "only the first virtual stage loads micro-batches");
        state.inputs.insert(slot);
        return true;
      case PipeOp::RecvActivation:
        return receive({false, slot.first, slot.second - 1}, state.inputs, slot, rank, state);
      case PipeOp::RecvGrad: return receive({true, slot.first, slot.second + 1}, state.gradients, slot, rank, state);
      case PipeOp::Forward: forward(instruction, rank, state); return true;
      case PipeOp::Backward: backward(instruction, rank, state); return true;
      case PipeOp::SendActivation:
        expect(forwards_.count(slot) && slot.second + 1 < stages_, instruction, rank,
               "sends an activation it has not computed, or past the last virtual stage");
        post({false, slot.first, slot.second}, (slot.second + 1) % shape_.ranks, state.clock, instruction, rank);
        return true;
      case PipeOp::SendGrad:
        expect(backwards_.count(slot) && slot.second > 0, instruction, rank,
               "sends a gradient it has not computed, or before the first virtual stage");
        post({true, slot.first, slot.second}, (slot.second - 1) % shape_.ranks, state.clock, instruction, rank);
        return true;
      default: return false;
    }
  }

  void forward(const PipeInstruction& instruction, int rank, RankState& state) {
    const Slot slot{instruction.micro_batch, instruction.virtual_stage};
    expect(state.inputs.count(slot) == 1, instruction, rank, "runs before its input was loaded or received");
    expect(forwards_.insert(slot).second, instruction, rank, "runs twice");
    state.clock += costs_.forward;
    result_.busy[static_cast<size_t>(rank)] += costs_.forward;
    int& peak = result_.peak_in_flight[static_cast<size_t>(rank)];
    peak = std::max(peak, ++state.alive);
  }

  void backward(const PipeInstruction& instruction, int rank, RankState& state) {
    const Slot slot{instruction.micro_batch, instruction.virtual_stage};
    expect(forwards_.count(slot) == 1, instruction, rank, "runs before its forward");
    expect(slot.second + 1 == stages_ || state.gradients.count(slot) == 1, instruction, rank,
           "runs before its output's gradient was received");
    expect(backwards_.insert(slot).second, instruction, rank, "runs twice");
    state.clock += costs_.backward;
    result_.busy[static_cast<size_t>(rank)] += costs_.backward;
    --state.alive;
  }

  // Posts a Send/Recv on its channel (a send: what was computed, within the pipeline), as part of
  // the rank's stream group `group` (Stream; 0 elsewhere).
  PostedOp post_op(const PipeInstruction& instruction, int rank, size_t group = 0) {
    const double clock = ranks_[static_cast<size_t>(rank)].clock;
    const Slot slot{instruction.micro_batch, instruction.virtual_stage};
    const bool gradient = instruction.op == PipeOp::SendGrad || instruction.op == PipeOp::RecvGrad;
    if (instruction.op == PipeOp::SendActivation || instruction.op == PipeOp::SendGrad) {
      expect((gradient ? backwards_ : forwards_).count(slot) == 1 && (gradient ? slot.second > 0 : slot.second + 1 < stages_),
             instruction, rank, "sends what it has not computed, or past the ends of the pipeline");
      const int to = (gradient ? slot.second - 1 : slot.second + 1) % shape_.ranks;
      const MessageKey key{gradient, slot.first, slot.second};
      const size_t index = post(key, to, clock, instruction, rank);
      channels_[{rank, to}].send_group.push_back(group);
      return {true, {rank, to}, index, key, slot};
    }
    const MessageKey key{gradient, slot.first, gradient ? slot.second + 1 : slot.second - 1};
    const int from = std::get<2>(key) % shape_.ranks;
    Channel& channel = channels_[{from, rank}];
    channel.receives.push_back(key);
    channel.receive_time.push_back(clock);
    channel.receive_group.push_back(group);
    return {false, {from, rank}, channel.receives.size() - 1, key, slot};
  }

  // A send goes from the rank's send buffer of its kind (activation or gradient), which the
  // previous send of that kind must have left (been waited for): `unwaited` are the messages
  // posted and not waited for.
  template <class Unwaited>
  void check_send_buffer_free(const PipeInstruction& instruction, int rank, const Unwaited& unwaited) const {
    if (instruction.op != PipeOp::SendActivation && instruction.op != PipeOp::SendGrad) return;
    for (const auto& [what, earlier] : unwaited)
      if (std::get<0>(what) == instruction.op)
        fail("pipeline schedule: rank ", rank, "'s ", describe(instruction), " reuses the send buffer of ",
             describe({std::get<0>(what), std::get<1>(what), std::get<2>(what)}), ", which is not waited for");
  }

  // Posted: a Send/Recv posts its message on its channel and never waits.
  void post_message(const PipeInstruction& instruction, int rank) {
    RankState& state = ranks_[static_cast<size_t>(rank)];
    check_send_buffer_free(instruction, rank, state.posted);
    const PostedOp op = post_op(instruction, rank);
    expect(state.posted.emplace(std::tuple{instruction.op, op.slot.first, op.slot.second}, op).second, instruction,
           rank, "is posted twice");
  }

  // Stream: the run of Send/Recv instructions at the rank's next one, posted as one group on its stream.
  void post_stream_group(int rank) {
    RankState& state = ranks_[static_cast<size_t>(rank)];
    const auto& list = schedules_[static_cast<size_t>(rank)];
    StreamGroup group;
    group.posted_at = state.clock;
    const size_t index = state.stream.size();
    for (; state.next < list.size() && is_message(list[state.next].op); ++state.next) {
      const PipeInstruction& instruction = list[state.next];
      check_placement(instruction, rank);
      check_send_buffer_free(instruction, rank, state.in_stream);
      group.ops.push_back(post_op(instruction, rank, index));
      expect(state.in_stream.emplace(std::tuple{instruction.op, instruction.micro_batch, instruction.virtual_stage},
                                     index).second, instruction, rank, "is posted twice");
    }
    state.stream.push_back(std::move(group));
  }

  // Stream: when group `group` of `rank` starts (its rank's previous group completed), if known.
  std::optional<double> stream_start(int rank, size_t group) const {
    const std::vector<StreamGroup>& stream = ranks_[static_cast<size_t>(rank)].stream;
    if (group >= stream.size() || (group > 0 && stream[group - 1].done < 0.0)) return std::nullopt;
    return std::max(stream[group].posted_at, group > 0 ? stream[group - 1].done : 0.0);
  }

  // Stream: completes every group whose partners all started; true when one did.
  bool progress_streams() {
    bool moved = false, progressed = true;
    while (progressed) {
      progressed = false;
      for (int rank = 0; rank < shape_.ranks; ++rank) {
        RankState& state = ranks_[static_cast<size_t>(rank)];
        while (state.stream_head < state.stream.size()) {
          std::optional<double> done = stream_start(rank, state.stream_head);
          for (const PostedOp& op : state.stream[state.stream_head].ops) {
            if (!done) break;
            const Channel& channel = channels_[op.channel];
            const std::vector<size_t>& partner_groups = op.is_send ? channel.receive_group : channel.send_group;
            const int partner = op.is_send ? op.channel.second : op.channel.first;
            const std::optional<double> partner_start =
                partner_groups.size() > op.index ? stream_start(partner, partner_groups[op.index]) : std::nullopt;
            done = partner_start ? std::optional<double>(std::max(*done, *partner_start)) : std::nullopt;
          }
          if (!done) break;
          state.stream[state.stream_head++].done = *done + costs_.latency;
          progressed = moved = true;
        }
      }
    }
    return moved;
  }

  // Stream: a Wait completes the group holding its message once that group completed (false: not
  // yet); its receives are usable from then on, and its send buffers free.
  bool wait_stream(const PipeInstruction& instruction, int rank) {
    RankState& state = ranks_[static_cast<size_t>(rank)];
    const auto found = state.in_stream.find({instruction.waited, instruction.micro_batch, instruction.virtual_stage});
    expect(found != state.in_stream.end(), instruction, rank, "waits for a message it has not posted (or waited for)");
    const size_t index = found->second;
    const StreamGroup& group = state.stream[index];
    if (group.done < 0.0) return false;
    for (const PostedOp& op : group.ops)
      if (!op.is_send) {
        check_order(channels_[op.channel].sent[op.index], op.key, op.slot, op.channel.first, rank);
        complete_receive(op.key, std::get<0>(op.key) ? state.gradients : state.inputs, op.slot);
      }
    state.clock = std::max(state.clock, group.done);
    std::erase_if(state.in_stream, [&](const auto& entry) { return entry.second == index; });
    return true;
  }

  // Posted: a Wait completes its message once both sides posted it (false: not yet), at the later
  // posting plus the latency (a send's buffer is free once its bytes are over).
  bool wait_posted(const PipeInstruction& instruction, int rank) {
    RankState& state = ranks_[static_cast<size_t>(rank)];
    const auto found = state.posted.find({instruction.waited, instruction.micro_batch, instruction.virtual_stage});
    expect(found != state.posted.end(), instruction, rank, "waits for a message it has not posted (or waited for)");
    const PostedOp& op = found->second;
    Channel& channel = channels_[op.channel];
    const std::vector<double>& partner_times = op.is_send ? channel.receive_time : channel.sent_time;
    if (partner_times.size() <= op.index) return false;
    const double posted = op.is_send ? channel.sent_time[op.index] : channel.receive_time[op.index];
    if (!op.is_send) {
      check_order(channel.sent[op.index], op.key, op.slot, op.channel.first, rank);
      complete_receive(op.key, std::get<0>(op.key) ? state.gradients : state.inputs, op.slot);
    }
    state.clock = std::max(state.clock, std::max(posted, partner_times[op.index]) + costs_.latency);
    state.posted.erase(found);
    return true;
  }

  // Messages between two ranks match in the order they were sent (NCCL's rule: no tags), so the
  // receive takes the next message of its channel; it waits while there is none, and receiving
  // another message than the one expected is an error.
  bool receive(const MessageKey& key, std::set<Slot>& into, const Slot& slot, int rank, RankState& state) {
    const int from = (std::get<2>(key)) % shape_.ranks;
    Channel& channel = channels_[{from, rank}];
    if (channel.received == channel.sent.size()) return false;
    check_order(channel.sent[channel.received], key, slot, from, rank);
    const double arrival = channel.sent_time[channel.received++] + costs_.latency;
    complete_receive(key, into, slot);
    state.clock = std::max(state.clock, arrival);
    return true;
  }

  void check_order(const MessageKey& next, const MessageKey& key, const Slot& slot, int from, int rank) const {
    ZT_CHECK(next == key, "pipeline schedule: rank ", rank, " receives the ", std::get<0>(key) ? "gradient" : "activation",
             " of micro-batch ", slot.first, " for virtual stage ", slot.second, " while the next message from rank ",
             from, " is the ", std::get<0>(next) ? "gradient" : "activation", " of micro-batch ", std::get<1>(next),
             " from virtual stage ", std::get<2>(next), " (messages between two ranks arrive in the order sent)");
  }

  void complete_receive(const MessageKey& key, std::set<Slot>& into, const Slot& slot) {
    ZT_CHECK(received_.insert(key).second, "pipeline schedule: a message for micro-batch ", slot.first,
             ", virtual stage ", slot.second, " is received twice");
    into.insert(slot);
  }

  // Records a send on its channel; returns its index there.
  size_t post(const MessageKey& key, int to_rank, double clock, const PipeInstruction& instruction, int rank) {
    expect(sent_.insert(key).second, instruction, rank, "sends the same message twice");
    ++(std::get<0>(key) ? result_.gradient_messages : result_.activation_messages);
    Channel& channel = channels_[{rank, to_rank}];
    channel.sent.push_back(key);
    channel.sent_time.push_back(clock);
    return channel.sent.size() - 1;
  }

  // Grouped and Blocking transports: posts the rank's next group (once), then completes it when
  // every send in it met its receive and every receive its send.
  GroupProgress advance_group(int rank) {
    RankState& state = ranks_[static_cast<size_t>(rank)];
    GroupProgress progress = GroupProgress::Blocked;
    if (!state.group_posted) {
      post_group(rank, state);
      state.group_posted = true;
      progress = GroupProgress::Posted;
    }
    double done_at = state.clock;
    for (const PostedOp& op : state.group) {
      Channel& channel = channels_[op.channel];
      const std::vector<double>& partner_times = op.is_send ? channel.receive_time : channel.sent_time;
      if (partner_times.size() <= op.index) return progress;
      if (!op.is_send) check_order(channel.sent[op.index], op.key, op.slot, op.channel.first, rank);
      done_at = std::max(done_at, partner_times[op.index]);
    }
    for (const PostedOp& op : state.group)
      if (!op.is_send) complete_receive(op.key, std::get<0>(op.key) ? state.gradients : state.inputs, op.slot);
    state.clock = done_at + (state.group.empty() ? 0.0 : costs_.latency);
    state.next = state.group_end;
    state.group.clear();
    state.group_posted = false;
    return GroupProgress::Done;
  }

  // The group: the run of messages at the rank's next instruction (one message when Blocking);
  // Grouped also posts the receives that feed the rank's next computation (they follow the run
  // after a LoadMicroBatch at most), as Megatron-LM's 1F1B posts the next input or gradient with
  // the send, so that two ranks sending to each other find each other's receive in the group.
  void post_group(int rank, RankState& state) {
    const auto& list = schedules_[static_cast<size_t>(rank)];
    size_t end = state.next + 1;
    while (costs_.transport == PipeTransport::Grouped && end < list.size() && is_message(list[end].op)) ++end;
    state.group_end = end;
    std::vector<size_t> members;
    for (size_t i = state.next; i < end; ++i)
      if (!state.pre_posted.count(i)) members.push_back(i);
    if (costs_.transport == PipeTransport::Grouped)  // the receives that feed the next computation
      for (size_t i = end; i < list.size() && !is_step_level(list[i].op); ++i) {
        const PipeOp op = list[i].op;
        if (op == PipeOp::Forward || op == PipeOp::Backward) break;
        if ((op == PipeOp::RecvActivation || op == PipeOp::RecvGrad) && state.pre_posted.insert(i).second)
          members.push_back(i);
      }
    for (size_t i : members) {
      check_placement(list[i], rank);
      state.group.push_back(post_op(list[i], rank));
    }
  }

  void expect(bool condition, const PipeInstruction& instruction, int rank, const char* what) const {
    ZT_CHECK(condition, "pipeline schedule: rank ", rank, "'s ", describe(instruction), " ", what);
  }

  bool all_at_same_step_level_instruction() const {
    const PipeInstruction* first = next_of(0);
    for (int rank = 0; rank < shape_.ranks; ++rank) {
      const PipeInstruction* instruction = next_of(rank);
      if (!instruction || !is_step_level(instruction->op) || instruction->op != first->op) return false;
    }
    for (int rank = 0; rank < shape_.ranks; ++rank) {
      const auto& in_stream = ranks_[static_cast<size_t>(rank)].in_stream;
      ZT_CHECK(in_stream.empty(), "pipeline schedule: rank ", rank, " reaches ", describe(*next_of(rank)), " with ",
               describe({std::get<0>(in_stream.begin()->first), std::get<1>(in_stream.begin()->first),
                         std::get<2>(in_stream.begin()->first)}), " posted and never waited for");
      const auto& posted = ranks_[static_cast<size_t>(rank)].posted;
      ZT_CHECK(posted.empty(), "pipeline schedule: rank ", rank, " reaches ", describe(*next_of(rank)), " with ",
               describe({std::get<0>(posted.begin()->first), std::get<1>(posted.begin()->first),
                         std::get<2>(posted.begin()->first)}), " posted and never waited for");
    }
    return true;
  }

  // Every rank is at the same step-level instruction: they leave it together.
  void release_barrier(bool first_barrier) {
    double latest = 0.0;
    for (const RankState& state : ranks_) latest = std::max(latest, state.clock);
    if (first_barrier) result_.step_time = latest;
    for (RankState& state : ranks_) {
      state.clock = latest;
      ++state.next;
    }
  }

  [[noreturn]] void fail_deadlock() const {
    std::string blocked;
    for (int rank = 0; rank < shape_.ranks; ++rank) {
      const PipeInstruction* instruction = next_of(rank);
      blocked += cat("\n  rank ", rank, ": ", instruction ? "waits at " + describe(*instruction) : "finished");
    }
    fail("pipeline schedule deadlocks (", shape_.ranks, " ranks x ", shape_.chunks, " chunks, ", shape_.micro_batches,
         " micro-batches):", blocked);
  }

  void check_complete() const {
    const size_t expected = static_cast<size_t>(shape_.micro_batches) * static_cast<size_t>(stages_);
    ZT_CHECK(forwards_.size() == expected && backwards_.size() == expected, "pipeline schedule: ", forwards_.size(),
             " forwards and ", backwards_.size(), " backwards of ", expected, " (micro-batch, virtual stage) pairs");
    ZT_CHECK(received_.size() == sent_.size(), "pipeline schedule: ", sent_.size(), " messages sent, ",
             received_.size(), " received");
  }

  const std::vector<std::vector<PipeInstruction>>& schedules_;
  PipeScheduleShape shape_;
  PipeCosts costs_;
  int stages_;
  std::vector<RankState> ranks_;
  std::set<Slot> forwards_, backwards_;
  std::set<MessageKey> sent_;
  std::set<MessageKey> received_;
  struct Channel {
    std::vector<MessageKey> sent;       // in sending order
    std::vector<double> sent_time;      // when each was posted
    size_t received = 0;                // Buffered: how many of them were received
    std::vector<MessageKey> receives;   // Grouped, Blocking: the receives posted, in order
    std::vector<double> receive_time;   // when each was posted
    std::vector<size_t> send_group, receive_group;  // Stream: each send's (receive's) group on its rank's stream
  };
  std::map<std::pair<int, int>, Channel> channels_;  // (from rank, to rank)
  PipeSimulation result_;
};

}  // namespace

PipeSimulation simulate_pipe_schedule(const std::vector<std::vector<PipeInstruction>>& schedules,
                                      const PipeScheduleShape& shape, const PipeCosts& costs) {
  return Simulator(schedules, shape, costs).run();
}

double theoretical_bubble_fraction(PipeScheduleKind kind, const PipeScheduleShape& shape) {
  const double p = shape.ranks, m = shape.micro_batches;
  const double v = kind == PipeScheduleKind::Interleaved ? shape.chunks : 1;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace zt
