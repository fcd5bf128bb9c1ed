// CompressedReduction (see compressed_reduction.h).
#include "zero/compressed_reduction.h"

#include <cmath>

#include "core/error.h"
#include "zero/rank_major.h"

namespace zt {

struct CompressedReduction::Group {
  int64_t numel = 0;             // N = W*C
  std::vector<UnitRange> units;  // the group's units (rank-major packing)
  std::unique_ptr<SignExchange> exchange;  // W > 1
  Buffer scratch;   // fp32 [N] work: the whole momentum, a local gradient, an average (rank-major)
  Buffer staging;   // fp32 [N] device: rank-major packing for an exchange in host memory
  std::vector<Buffer> replica;  // fp32 [N] work each: param, then state_names() + local_state_names()
};

CompressedReduction::CompressedReduction(const ReductionContext& context, std::unique_ptr<GradientReduction> exact,
                                         const Optimizer& optimizer, const std::string& comm_backend_name,
                                         Communicator* host_comm)
    : context_(context), exact_(std::move(exact)), device_(*context.backend), comm_(*context.comm), host_comm_(host_comm),
      store_(*context.store), optimizer_(optimizer), stage_(context.stage), world_(context.world), rank_(context.rank) {
  ZT_CHECK(stage_ <= 2, "optimizer ", optimizer.name(), " exchanges each rank's whole momentum and gradient, which ZeRO "
           "stage 3 never holds: use zero_optimization.stage 0, 1 or 2");
  // comm_backend_name "mpi" on a GPU: the signs are packed and sent from host memory.
  const bool on_host = comm_backend_name == "mpi" && device_.device() != Device::CPU && world_ > 1;
  ZT_CHECK(!on_host || host_comm, "optimizer ", optimizer.name(), ": comm_backend_name \"mpi\" needs the MPI communicator");
  if (on_host) host_ = device_.make_pageable_host_backend();
  const size_t replica_buffers =
      optimizer.local_state_names().empty() ? 0 : 1 + optimizer.state_names().size() + optimizer.local_state_names().size();
  for (int g = 0; g < kParamGroups; ++g) {
    auto state = std::make_unique<Group>();
    const ParamGroup param_group = static_cast<ParamGroup>(g);
    if (param_group != ParamGroup::Frozen) {
      state->numel = store_.group(param_group).numel;
      state->units = store_.group(param_group).units;
      if (state->numel && world_ > 1)
        state->exchange = std::make_unique<SignExchange>(work(), work_comm(), state->numel / world_);
      for (size_t k = 0; state->numel && k < replica_buffers; ++k) {
        state->replica.emplace_back(work(), static_cast<size_t>(state->numel) * sizeof(float));
        work().fill(flat_f32(state->replica.back(), state->numel), 0.0f);
      }
    }
    groups_.push_back(std::move(state));
  }
}

CompressedReduction::~CompressedReduction() = default;

CompressedReduction::Group& CompressedReduction::group(ParamGroup group) { return *groups_[static_cast<size_t>(group)]; }
Backend& CompressedReduction::work() { return host_ ? *host_ : device_; }
Communicator& CompressedReduction::work_comm() { return host_ ? *host_comm_ : comm_; }

int64_t CompressedReduction::bytes() const {
  int64_t total = 0;
  for (const auto& g : groups_) {
    if (g->exchange) total += g->exchange->bytes() + g->numel * static_cast<int64_t>(sizeof(float));  // + scratch
    for (const Buffer& buffer : g->replica) total += static_cast<int64_t>(buffer.bytes());
  }
  return total;
}

void CompressedReduction::to_rank_major(Group& g, Tensor out, Tensor natural) {
  if (&work() == &device_) return pack_rank_major(device_, out, natural, g.units, world_);
  ensure_buffer(g.staging, device_, g.numel, DType::F32);
  Tensor packed = flat_f32(g.staging, g.numel);
  pack_rank_major(device_, packed, natural, g.units, world_);
  device_.copy(out, packed);
}

void CompressedReduction::from_rank_major(Group& g, Tensor natural, Tensor rank_major) {
  if (rank_major.device != device_.device()) {  // through the device staging buffer
    ensure_buffer(g.staging, device_, g.numel, DType::F32);
    Tensor copy = flat_f32(g.staging, g.numel);
    device_.copy(copy, rank_major);
    rank_major = copy;
  }
  unpack_rank_major(device_, natural, rank_major, g.units, world_);
}

// Stage 0: the whole buffer is on the device in natural order; else this rank's partition
// (host memory with offload) is chunk `rank`, the others all-gathered.
void CompressedReduction::gather_whole(Group& g, Tensor out, Tensor partition) {
  if (stage_ == 0) return to_rank_major(g, out, partition);
  const int64_t own = g.numel / world_;
  Tensor mine = out.rows(rank_ * own, own);
  device_.copy(mine, partition);  // across devices where they differ
  if (world_ > 1) work_comm().all_gather(out, mine);
}

void CompressedReduction::scatter_whole(Group& g, Tensor partition, Tensor whole) {
  if (stage_ == 0) return from_rank_major(g, partition, whole);
  const int64_t own = g.numel / world_;
  device_.copy(partition, whole.rows(rank_ * own, own));
}

// ---- the step -------------------------------------------------------------------------------------

void CompressedReduction::begin_step(int64_t update_number) {
  exchange_ = optimizer_.momentum_exchange(update_number);
  local_ = optimizer_.local_step(update_number);
  last_ = false;
  exact_->begin_step(update_number);
}

void CompressedReduction::begin_micro_batch(bool last) {
  last_ = last;
  exact_->begin_micro_batch(last);
}

void CompressedReduction::unit_ready(int unit) {
  if (!keeps_local()) exact_->unit_ready(unit);  // else the local gradients stay as they are
}

void CompressedReduction::end_micro_batch() {
  if (!keeps_local()) exact_->end_micro_batch();
}

std::vector<Tensor> CompressedReduction::local_gradients() {
  std::vector<Tensor> views;
  for (ParamGroup group : kTrainableGroups)
    if (store_.group(group).numel) views.push_back(store_.group_grads(group));
  return views;
}

// Nothing reduced: this rank's gradients, in the compute dtype as reduced ones would be.
bool CompressedReduction::finish() {
  if (!keeps_local()) return exact_->finish();
  if (context_.compute_dtype != DType::F32)
    for (Tensor grads : local_gradients()) device_.round_to(grads, context_.compute_dtype);
  return false;
}

// No rank has the reduced gradient: its norm is estimated as the root mean square over the ranks
// of || W g_local || (exact when every rank's gradient is the same), so that every rank clips
// alike. DeepSpeed clips each rank by its own local norm.
double CompressedReduction::gradient_norm() {
  if (!keeps_local()) return exact_->gradient_norm();
  return std::sqrt(world_ * comm_.all_reduce_sum(device_.sum_squares_of(local_gradients())));
}

bool CompressedReduction::overflow() {
  if (!keeps_local()) return exact_->overflow();
  return comm_.all_reduce_max(device_.has_inf_or_nan_in(local_gradients()) ? 1.0 : 0.0) > 0.0;
}

UpdateSource CompressedReduction::prepare_update(const OptimizerStep& step, std::span<const GroupPartitions> groups) {
  if (local_) {  // each group's replica updated (and synchronised when the step says so)
    OptimizerStep with_sum = step;
    if (local_->first)  // DeepSpeed zeroes the error feedback once, when the variance freezes
      for (auto& g : groups_)
        if (g->exchange) {
          work().fill(g->exchange->worker_error(), 0.0f);
          work().fill(g->exchange->server_error(), 0.0f);
        }
    if (!replica_valid_) lr_sum_ = 0.0;
    lr_sum_ += step.lr;
    with_sum.local_lr_sum = lr_sum_;
    for (const GroupPartitions& partitions : groups)
      local_step(partitions, store_.group_grads(partitions.group), with_sum, *local_);
    replica_valid_ = true;
    if (local_->synchronise) lr_sum_ = 0.0;
    return UpdateSource::Done;
  }
  if (!exchange_) return UpdateSource::Reduced;
  for (const GroupPartitions& partitions : groups)
    exchange_momentum(partitions.group, store_.group_grads(partitions.group), partitions.state[exchange_->state_index],
                      reduced(partitions.group), step, *exchange_);
  return UpdateSource::Exchanged;
}

// ---- momentum exchange (1-bit Adam; 0/1 Adam's compressed gradients) ----------------------------------

void CompressedReduction::exchange_momentum(ParamGroup param_group, Tensor grads, Tensor momentum, Tensor reduced,
                                            const OptimizerStep& step, const MomentumExchange& exchange) {
  Group& g = group(param_group);
  const float gradient_weight = exchange.gradient_weight * static_cast<float>(world_) / step.grad_divisor;
  if (world_ == 1) {  // nothing to exchange (DeepSpeed on one GPU too): the update takes b1 m + (1 - b1) g
    device_.scale(grads, gradient_weight);
    if (exchange.momentum_weight != 0.0f) {
      Tensor m = momentum;
      if (m.device != device_.device()) {
        ensure_buffer(g.staging, device_, g.numel, DType::F32);
        m = flat_f32(g.staging, g.numel);
        device_.copy(m, momentum);
      }
      device_.accumulate(grads, m, exchange.momentum_weight);
    }
    return;
  }
  SignExchange& sign_exchange = *g.exchange;
  Backend& w = work();
  // This rank's vector: gradient_weight W g_local ...
  Tensor x = sign_exchange.vector();  // fp32 [W*C] rank-major
  to_rank_major(g, x, grads);
  w.scale(x, gradient_weight);
  // ... + momentum_weight m: the last exchange's average, or (its first time: after the warm-up
  // or a resume) the momentum state itself, gathered whole once. After a resume past the freeze
  // m is the last average (+-scale per chunk), taken back as such so that the sum is the same.
  if (exchange.momentum_weight != 0.0f) {
    const std::optional<MomentumExchange> previous = optimizer_.momentum_exchange(step.update_number - 1);
    const bool resumed = !sign_exchange.has_average() && previous && previous->momentum_weight != 0.0f;
    if (!sign_exchange.has_average()) {
      ensure_buffer(g.scratch, w, g.numel, DType::F32);
      Tensor whole = flat_f32(g.scratch, g.numel);  // fp32 [W*C] rank-major
      gather_whole(g, whole, momentum);
      if (resumed) sign_exchange.restore_average(whole);
      else w.accumulate(x, whole, exchange.momentum_weight);
    }
    if (sign_exchange.has_average()) sign_exchange.add_average(x, exchange.momentum_weight);
  }
  sign_exchange.exchange();
  // The average where the update reads it: all of it in natural order (stage 0), or this rank's chunk.
  if (stage_ == 0) {
    w.fill(x, 0.0f);
    sign_exchange.add_average(x, 1.0f);
    from_rank_major(g, reduced, x);
  } else {
    Tensor mine = x.rows(0, reduced.numel());
    w.fill(mine, 0.0f);
    sign_exchange.add_own_chunk(mine, 1.0f);
    device_.copy(reduced, mine);
  }
}

// ---- local steps (0/1 Adam) -----------------------------------------------------------------------

// The replica from the engine's partitions (the last synchronised state), the local-only state zero.
void CompressedReduction::enter_replica(Group& g, const GroupPartitions& partitions) {
  gather_whole(g, flat_f32(g.replica[0], g.numel), partitions.master);
  const size_t states = partitions.state.size();
  for (size_t k = 0; k < states; ++k) gather_whole(g, flat_f32(g.replica[1 + k], g.numel), partitions.state[k]);
  for (size_t k = 1 + states; k < g.replica.size(); ++k) work().fill(flat_f32(g.replica[k], g.numel), 0.0f);
}

void CompressedReduction::local_step(const GroupPartitions& partitions, Tensor grads, const OptimizerStep& step,
                                     const LocalStep& local) {
  Group& g = group(partitions.group);
  Backend& w = work();
  ZT_CHECK(!g.replica.empty(), "optimizer ", optimizer_.name(), " takes local steps but has no local state");
  if (!replica_valid_) enter_replica(g, partitions);
  // The local gradient, scaled as the reduced one would be: W g_local / grad_divisor.
  ensure_buffer(g.scratch, w, g.numel, DType::F32);
  Tensor gradient = flat_f32(g.scratch, g.numel);  // fp32 [N] rank-major
  to_rank_major(g, gradient, grads);
  w.scale(gradient, static_cast<float>(world_) / step.grad_divisor);
  OptimizerPiece piece;
  piece.decay = partitions.group == ParamGroup::Decay;
  piece.param = flat_f32(g.replica[0], g.numel);
  piece.grad = gradient;
  for (size_t k = 1; k < g.replica.size(); ++k) piece.state.push_back(flat_f32(g.replica[k], g.numel));
  optimizer_.update(w, piece, step);
  if (local.synchronise) {
    Tensor average = gradient;  // the gradient is used up: its buffer takes the average
    if (g.exchange) {
      optimizer_.synchronisation_input(w, piece, g.exchange->vector());
      g.exchange->exchange();
      w.fill(average, 0.0f);
      g.exchange->add_average(average, 1.0f);
    } else {  // one rank: the average is its own
      optimizer_.synchronisation_input(w, piece, average);
    }
    optimizer_.synchronise(w, piece, average, step);
    // The synchronised replica is the same on every rank: it is the partitions' state again.
    scatter_whole(g, partitions.master, piece.param);
    for (size_t k = 0; k < partitions.state.size(); ++k) scatter_whole(g, partitions.state[k], piece.state[k]);
  }
  from_rank_major(g, partitions.params, piece.param);  // fp32 -> compute dtype
}

// ---- checkpoints ----------------------------------------------------------------------------------

std::vector<CompressedReduction::Views> CompressedReduction::views() {
  std::vector<Views> views;
  std::vector<std::string> replica_names = {"replica_param"};
  for (const std::string& name : optimizer_.state_names()) replica_names.push_back("replica_" + name);
  for (const std::string& name : optimizer_.local_state_names()) replica_names.push_back("replica_" + name);
  for (ParamGroup param_group : kTrainableGroups) {
    Group& g = group(param_group);
    if (!g.numel || (!g.exchange && g.replica.empty())) continue;
    Views view{param_group, {}, {}};
    if (g.exchange) {
      view.names = {"worker_error", "server_error"};
      view.buffers = {g.exchange->worker_error(), g.exchange->server_error()};
    }
    for (size_t k = 0; k < g.replica.size(); ++k) {
      view.names.push_back(replica_names[k]);
      view.buffers.push_back(flat_f32(g.replica[k], g.numel));
    }
    views.push_back(std::move(view));
  }
  return views;
}

void CompressedReduction::restore_scalars(const Scalars& scalars) {
  replica_valid_ = scalars.replica;
  lr_sum_ = scalars.lr_sum;
}

void CompressedReduction::replica_to_params(ParamGroup param_group, Tensor params) {
  Group& g = group(param_group);
  if (g.numel && !g.replica.empty()) from_rank_major(g, params, flat_f32(g.replica[0], g.numel));
}

}  // namespace zt
