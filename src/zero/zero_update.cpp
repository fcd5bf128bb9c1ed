// ZeroEngine's update (zero_engine.h): this rank's partition updated piece by piece by the
// optimizer (on the host with offload), the compute parameters made current from it (uploads,
// all-gathers, stage 3's invalidation). ZeRO-Offload's host update beside the device (the delayed
// parameter update, the per-bucket update) is offload_overlap.cpp.
#include "zero/zero_engine.h"

#include <deque>

#include "zero/group_state.h"
#include "zero/rank_major.h"

namespace zt {

// Stages 1/2 update bucket by bucket (allgather_bucket_size) and start each bucket's all-gather as
// soon as its partition is updated, so the gathers overlap the (CPU) update of the next buckets;
// the other stages update the whole partition as one piece.
// Stage 3 with offload_optimizer.ratio < 1: the device-resident units and the offloaded ones.
std::vector<std::vector<UnitRange>> ZeroEngine::gather_pieces(ParamGroup group) const {
  const std::vector<UnitRange>& units = store_.group(group).units;
  if (stage_ == 1 || stage_ == 2) return plan_buckets(units, zero_.allgather_bucket_size);
  const auto split = units.begin() + static_cast<std::ptrdiff_t>(groups_[static_cast<size_t>(group)]->resident_units);
  if (split == units.begin()) return {units};
  if (split == units.end()) return {std::vector<UnitRange>(units.begin(), split)};
  return {std::vector<UnitRange>(units.begin(), split), std::vector<UnitRange>(split, units.end())};
}

// fp32 gradients: the optimizer takes a gather piece at once. 16-bit ones: unit by unit, so that
// the fp32 copy the optimizer reads (wide_grad_) is one unit's slice, not a bucket's or the whole
// gradient's (which would eat the saving).
std::vector<std::vector<UnitRange>> ZeroEngine::update_pieces(const std::vector<UnitRange>& bucket) const {
  if (store_.grad_dtype() == DType::F32) return {bucket};
  return plan_buckets(bucket, 1);  // each unit with elements a piece of its own
}

// Elements of this rank's partition a piece of consecutive units covers (stage 0: all of them).
int64_t ZeroEngine::piece_numel(const std::vector<UnitRange>& units) const {
  return slice_numel(units, stage_ == 0 ? 1 : world_);
}

Tensor ZeroEngine::fp32_gradient(Backend& on, Tensor grad) {
  if (grad.dtype == DType::F32) return grad;
  const Buffer& widening = offload_ && &on == &backend_ ? resident_wide_grad_ : wide_grad_;
  Tensor wide = widening.view(DType::F32, {grad.numel()});
  on.copy(wide, grad);  // exact: every 16-bit value is an fp32 value
  return wide;
}

// ---- update ------------------------------------------------------------------------------------

void ZeroEngine::apply_update(const OptimizerStep& step) {
  ZT_CHECK(!fused_, "ZeRO: optimizer ", optimizer_->name(), " updates inside backward (begin_update_pass), not after it");
  settle_host_uploads();  // before the host partitions change
  for (int unit = 0; unit < store_.num_units(); ++unit) finish_prefetch(unit);
  if (bucket_step_ && gradients_finished_) return finish_bucket_update(step);  // ran during the last backward
  bucket_step_.reset();  // (armed, but the last backward finished no bucket: the ordinary update)
  finish_delayed_update();
  if (!delays(step)) order_after_partition_uploads();  // the update below rewrites the compute partitions
  std::vector<GroupPartitions> partitions;  // (the compressed strategies': stages 0-2, never split)
  for (ParamGroup group : kTrainableGroups) {
    GroupState& s = state(group);
    if (!s.partition_numel || !reduction_->compressed()) continue;
    GroupPartitions views{group, s.master_rows(0, s.partition_numel), {}, store_.group_params(group)};
    for (size_t k = 0; k < s.state.size(); ++k) views.state.push_back(s.state_rows(k, 0, s.partition_numel));
    partitions.push_back(std::move(views));
  }
  const UpdateSource source = reduction_->prepare_update(step, partitions);
  if (source == UpdateSource::Done) {  // local steps: the compute parameters are the strategy's replica
    update_compute_partitions();
    return;
  }
  // An exchanged average stands where the reduced gradients would, already divided.
  const float grad_divisor = source == UpdateSource::Exchanged ? 1.0f : step.grad_divisor;
  if (delays(step)) return start_delayed_update(step, grad_divisor);
  if (partial_offload()) update_resident_parts(step, grad_divisor);  // queued on the device first
  std::deque<BucketGather> gathers;
  for (ParamGroup group : kTrainableGroups) {
    if (!state(group).partition_numel) continue;
    for (const std::vector<UnitRange>& bucket : gather_pieces(group)) {
      if (offload_ && state(group).resident(piece_begin(bucket))) continue;  // (done above)
      for (const std::vector<UnitRange>& units : update_pieces(bucket)) update_piece(group, units, step, grad_divisor);
      if (stage_ == 1 || stage_ == 2) start_bounded_gather(gathers, group, bucket);
    }
  }
  if (partial_offload())  // the resident parts' compute parameters, after the host's (a download with offload_param)
    for (ParamGroup group : kTrainableGroups) update_compute_partition(group, 0, state(group).resident_numel);
  if (offload_) uploads_done_ = backend_.record_event();
  for (BucketGather& gather : gathers) finish_bucket_gather(gather);
  if (stage_ == 0 || stage_ == 3) sync_params_after_update();
}

int64_t ZeroEngine::piece_begin(const std::vector<UnitRange>& units) const {
  return units.front().begin / (stage_ == 0 ? 1 : world_);
}

// offload_optimizer.ratio < 1: the optimizer over the device-resident parts, queued on the device
// before the host updates the rest (on a GPU the two run side by side); their compute
// parameters are made current after the host's part (apply_update).
void ZeroEngine::update_resident_parts(const OptimizerStep& step, float grad_divisor, bool from_copy) {
  for (ParamGroup group : kTrainableGroups) {
    const GroupState& s = state(group);
    if (!s.resident_numel) continue;
    for (const std::vector<UnitRange>& units : update_pieces(gather_pieces(group).front())) {
      const int64_t begin = piece_begin(units), numel = piece_numel(units);
      if (!numel) continue;
      const Tensor grad = from_copy ? s.resident_grad_copy.view(store_.grad_dtype(), {s.resident_numel}).rows(begin, numel)
                                    : piece_gradient(group, begin, numel);
      optimize_piece(group, units, grad, step, grad_divisor, Tensor());
    }
  }
}

Backend& ZeroEngine::piece_backend(ParamGroup group, int64_t begin) {
  return offload_ && !state(group).resident(begin) ? *host_ : backend_;
}

// The optimizer on this rank's partition of `units` of `group` (consecutive), from the reduced
// gradient divided by grad_divisor; then the piece's compute parameters.
void ZeroEngine::update_piece(ParamGroup group, const std::vector<UnitRange>& units, const OptimizerStep& step,
                              float grad_divisor) {
  const int64_t begin = piece_begin(units), numel = piece_numel(units);
  if (!numel) return;
  const Tensor rounded = rounding_target(group, begin, numel, true);  // (offloaded pieces only)
  optimize_piece(group, units, piece_gradient(group, begin, numel), step, grad_divisor, rounded);
  if (!rounded.data) return update_compute_partition(group, begin, numel);
  GroupState& s = state(group);
  const Tensor compute = compute_partition_view(s).rows(begin, numel);
  if (rounded.data != compute.data)  // the staging copy the update rounded into: upload it
    backend_.copy_async(compute, rounded);  // overlaps the next piece's update
}

// Where the update of a piece may write its parameters rounded to the 16-bit compute dtype itself
// (bf16/fp16 [numel], host memory), or empty: the host staging copy that is uploaded after it
// (offload to a GPU), or, when `compute_too`, the compute partition itself where that is host
// memory (the CPU backend, offload_param); the delayed update (not `compute_too`) with
// offload_param on a GPU rounds into the partition's twin (finish_delayed_update swaps them).
// Writing the staging copy waits for the last uploads that read it.
Tensor ZeroEngine::rounding_target(ParamGroup group, int64_t begin, int64_t numel, bool compute_too) {
  GroupState& s = state(group);
  if (!offload_ || !rounds_ || !s.compute_partition.data() || s.resident(begin)) return {};
  const Tensor compute = compute_partition_view(s).rows(begin, numel);
  if (compute_too && compute.device == Device::CPU) return compute;
  if (s.host_compute.data()) {
    if (uploads_done_) {
      uploads_done_->wait();
      uploads_done_.reset();
    }
    // offload_param's twin of the host partition is laid out as the partition ([P], swapped with it);
    // the staging copy of a GPU's partition holds the offloaded part only ([P - K]).
    if (compute.device == Device::CPU) return s.host_compute.view(compute_dtype_, {s.partition_numel}).rows(begin, numel);
    return s.offloaded_rows(s.host_compute, compute_dtype_, begin, numel);
  }
  return {};
}

Tensor ZeroEngine::piece_gradient(ParamGroup group, int64_t begin, int64_t numel, bool queued) {
  Tensor grad = reduction_->reduced(group).rows(begin, numel);  // grad dtype [numel]
  if (!offload_ || state(group).resident(begin)) return grad;
  // The gradient goes to the host, where the optimizer state lives.
  Tensor host_grad = host_grad_rows(state(group), begin, numel);
  if (host_grads_ready_) {  // copied bucket by bucket during backward
    host_grads_ready_->wait();
    host_grads_ready_.reset();
  }
  if (gradients_finished_) return host_grad;
  if (queued)
    backend_.copy_async(host_grad, grad);  // the caller waits for an event after it
  else
    backend_.copy(host_grad, grad);
  return host_grad;
}

// grad: grad dtype [numel] on the state backend (piece_gradient's), not yet divided; rounded:
// empty or compute dtype [numel] (rounding_target), which receives the updated parameters rounded.
// With offload, an optimizer that fuses_offload_passes (AdamW on the CPU) does all of it in one
// pass; otherwise the gradient is widened (into wide_grad_) and divided in place first, and the
// parameters rounded after: the same bits.
void ZeroEngine::optimize_piece(ParamGroup group, const std::vector<UnitRange>& units, Tensor grad,
                                const OptimizerStep& step, float grad_divisor, Tensor rounded) {
  GroupState& s = state(group);
  const int64_t begin = piece_begin(units), numel = grad.numel();
  Backend& state_backend = piece_backend(group, begin);
  OptimizerPiece piece;
  piece.decay = group == ParamGroup::Decay;
  piece.param = s.master_rows(begin, numel);
  for (size_t k = 0; k < s.state.size(); ++k) piece.state.push_back(s.state_rows(k, begin, numel));
  if (optimizer_->needs_tensor_slices()) add_tensor_slices(piece, group, units, stage_ >= 1 && world_ > 1);
  if (offload_ && optimizer_->fuses_offload_passes(state_backend)) {
    piece.grad = grad;
    piece.grad_scale = 1.0f / grad_divisor;  // as scale() below multiplies (x 1 is exact)
    piece.param_out = rounded;
    return optimizer_->update(state_backend, piece, step);
  }
  piece.grad = fp32_gradient(state_backend, grad);  // fp32 [numel]
  if (grad_divisor != 1.0f) state_backend.scale(piece.grad, 1.0f / grad_divisor);
  optimizer_->update(state_backend, piece, step);
  if (rounded.data) state_backend.copy(rounded, piece.param);  // fp32 -> compute dtype (RNE)
}

void ZeroEngine::update_compute_partitions() {
  order_after_partition_uploads();  // (rows a delayed update's upload may still write)
  for (ParamGroup group : kTrainableGroups) {
    const GroupState& s = state(group);
    update_compute_partition(group, 0, s.resident_numel);
    update_compute_partition(group, s.resident_numel, s.offloaded_numel());
  }
  if (offload_) uploads_done_ = backend_.record_event();
}

// Elements [begin, begin + numel) of the compute partition from the master's, which are all in
// one part (device-resident, or not).
void ZeroEngine::update_compute_partition(ParamGroup group, int64_t begin, int64_t numel) {
  GroupState& s = state(group);
  if (!s.compute_partition.data() || !numel) return;
  Tensor master = s.master_rows(begin, numel);                     // fp32
  Tensor compute = compute_partition_view(s).rows(begin, numel);  // compute dtype
  // offload_param with this part's master on the device: the gathers round it there
  // (device_master_rows); nothing reads this part of the host partition.
  if (compute.device == Device::CPU && master.device != Device::CPU) return;
  if (offload_ && s.resident(begin)) {
    backend_.copy(compute, master);  // rounded on the device
  } else if (const Tensor rounded = rounding_target(group, begin, numel, true); rounded.data) {
    host_->copy(rounded, master);  // offloaded 16-bit compute: round on the CPU
    if (rounded.data != compute.data) backend_.copy_async(compute, rounded);  // and upload half the bytes
  } else if (offload_ && compute.device == Device::CPU) {
    host_->copy(compute, master);  // both in host memory (offload_param too)
  } else {
    backend_.copy(compute, master);  // fp32 -> compute dtype (RNE)
  }
}

// Stage 1/2: all-gather one bucket of consecutive units of a group from the compute partition
// into the full parameters (one unit: straight into place; several: through a rank-major staging
// buffer, unpacked when the gather completes).
ZeroEngine::BucketGather ZeroEngine::start_bucket_gather(ParamGroup group, const std::vector<UnitRange>& bucket) {
  BucketGather gather;
  gather.group = group;
  gather.units = bucket;
  const int64_t per_rank = slice_numel(bucket, world_);
  Tensor in = gather_source(group).rows(bucket.front().begin / world_, per_rank);
  if (bucket.size() == 1) {
    gather.pending = all_gather_async(store_.group_params(group).rows(bucket.front().begin, bucket.front().numel), in);
  } else {
    gather.staging = Buffer(backend_, static_cast<size_t>(per_rank * world_) * dtype_size(in.dtype));
    gather.pending = all_gather_async(gather.staging.view(in.dtype, {per_rank * world_}), in);
  }
  return gather;
}

// At most kGathersInFlight bucket gathers (and their staging buffers) at a time: enough to
// overlap a gather with the next bucket's update, without a staging copy of every bucket alive.
void ZeroEngine::start_bounded_gather(std::deque<BucketGather>& gathers, ParamGroup group,
                                      const std::vector<UnitRange>& bucket) {
  constexpr size_t kGathersInFlight = 2;
  if (gathers.size() >= kGathersInFlight) {
    finish_bucket_gather(gathers.front());
    gathers.pop_front();
  }
  gathers.push_back(start_bucket_gather(group, bucket));
}

void ZeroEngine::finish_bucket_gather(BucketGather& gather) {
  gather.pending->wait();
  if (gather.units.size() > 1) {
    const int64_t per_rank = slice_numel(gather.units, world_);
    unpack_rank_major(backend_, store_.group_params(gather.group),
                      gather.staging.view(store_.param_dtype(), {per_rank * world_}), gather.units, world_);
  }
}

void ZeroEngine::sync_params_after_update() {
  if (stage_ == 0) {
    for (ParamGroup group : kTrainableGroups)
      if (state(group).partition_numel)  // fp32 -> compute dtype (RNE)
        backend_.copy(store_.group_params(group), state(group).master_rows(0, state(group).partition_numel));
    return;
  }
  if (stage_ == 3) {  // gathered copies are stale: refresh the persistent ones, drop the others
    for (int unit = 0; unit < store_.num_units(); ++unit) {
      invalidate_secondary(unit);
      UnitState& u = units_[static_cast<size_t>(unit)];
      if (!u.gathered) continue;
      finish_prefetch(unit);
      discard_unit_params(unit);
      u.gathered = false;
      if (store_.unit_numel(unit) < zero_.stage3_param_persistence_threshold) gather_unit(unit, false);
    }
    return;
  }
  std::deque<BucketGather> gathers;  // stage 1/2: all-gather the updated partitions
  order_after_partition_uploads();
  for (ParamGroup group : kTrainableGroups)
    for (const std::vector<UnitRange>& bucket : plan_buckets(store_.group(group).units, zero_.allgather_bucket_size))
      start_bounded_gather(gathers, group, bucket);
  for (BucketGather& gather : gathers) finish_bucket_gather(gather);
}


void ZeroEngine::refresh_params_from_master() {
  finish_delayed_update();  // (none in flight after a load; a caller between steps gets the current parameters)
  update_compute_partitions();
  sync_params_after_update();
}

}  // namespace zt
