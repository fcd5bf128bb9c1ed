// ZeRO-Offload's host update beside the device (zero_engine.h, docs/zero-offload.md): the CPU
// optimizer runs on a worker thread (host_worker.h) that touches host memory only (master,
// optimizer state, the host gradient copy and its fp32 widening, the 16-bit staging copy it rounds
// into); everything on the device, the collectives included, stays on the calling thread, which
// makes the update's parameters current once the worker is done (finish_delayed_update).
//
// Delayed parameter update (DPU, --delayed-param-update N). Updates 1..N run as usual. From update
// N + 1 on, apply_update for step t starts the optimizer on the step's gradients on the worker;
// step t + 1's forward and backward run meanwhile on the device, with the parameters before update
// t (those of update t - 1); step t + 1's apply_update waits for update t, makes its parameters
// current and starts update t + 1. In symbols, with p_k the fp32 master after k updates and g_t
// the gradient step t computes:  g_t = grad(p_{t-2}) (p_{t-1} for the first delayed step),
// p_t = opt(p_{t-1}, g_t). The two host buffers the update reads and writes have twins
// (GroupState::host_grad_spare, host_compute_spare) that it does not touch, so that the next step
// runs as an ordinary one: its backward copies each bucket's gradients to the host as it
// completes, and the update's start waits for nothing on the device. A checkpoint is saved after
// finish_delayed_update: the saved state is p_t with nothing in flight, and the saving run
// continues from it exactly as a run resumed from it does.
//
// Per-bucket update (--update-per-bucket). In the step's last backward each reduced bucket's
// slices are copied to the host as the bucket completes (slices_final); once the backward of the
// next unit is issued (gradients_ready), the calling thread waits for that copy, which the device
// finished while that backward stays queued, and posts the bucket's units to the worker, which
// updates them while the backward goes on. A piece (a unit's slice of a parameter group) whose
// gradient is not finite is left unchanged (and the step is reported skipped, as the gradient check
// finds it: StepRunner). Exact only where
// each element's update is known before the backward ends: an element-wise optimizer, no
// clipping by the global norm, no fp16 loss scale (the refusals: check_bucket_update, StepRunner).
#include "zero/zero_engine.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "zero/group_state.h"
#include "zero/host_worker.h"
#include "zero/rank_major.h"

namespace zt {

// ---- the worker's pieces ------------------------------------------------------------------------

// On the worker: the optimizer over `pieces` of the partition. `skip_non_finite`: a piece whose
// gradient holds an inf or NaN is left unchanged (the per-bucket update's rule).
void ZeroEngine::post_host_pieces(std::vector<HostPiece> pieces, const OptimizerStep& step, float grad_divisor,
                                  bool skip_non_finite) {
  host_update_in_flight_ = true;
  worker_->post([this, pieces = std::move(pieces), step, grad_divisor, skip_non_finite] {
    for (const HostPiece& piece : pieces) {
      const Tensor grads[] = {piece.grad};
      if (skip_non_finite && host_->has_inf_or_nan_in(grads)) continue;
      optimize_piece(piece.group, piece.units, piece.grad, step, grad_divisor, piece.rounded);
    }
  });
}

// Completes the host update in flight (DPU's, or this step's per-bucket one) and makes its
// parameters current: the staging copy the worker rounded into uploaded (a GPU with 16-bit
// compute), else the compute partitions rounded from the master here; then the all-gathers or
// stage 3's invalidation.
void ZeroEngine::finish_delayed_update() {
  if (!copied_buckets_.empty()) post_copied_buckets();  // the last buckets: copied before the gradient check
  bucket_step_.reset();
  if (!host_update_in_flight_) return;
  settle_host_uploads();  // they read the partitions
  for (int unit = 0; unit < store_.num_units(); ++unit) finish_prefetch(unit);
  host_update_in_flight_ = false;
  if (delayed_resident_) {  // the device-resident part's share of the update (queued first: beside the wait)
    update_resident_parts(delayed_resident_->step, delayed_resident_->grad_divisor, true);
    delayed_resident_.reset();
  }
  worker_->wait();  // rethrows the worker's error, if any
  bool uploads = false;
  for (ParamGroup group : kTrainableGroups) {
    GroupState& s = state(group);
    if (!s.compute_partition.data() || !s.partition_numel) continue;
    if (s.host_compute.data() && compute_partition_view(s).device == Device::CPU)
      std::swap(s.compute_partition, s.host_compute);  // offload_param: the worker's twin becomes the partition
    else if (s.host_compute.data())  // rounded by the worker: uploaded below
      uploads = true;
    else
      update_compute_partition(group, s.resident_numel, s.offloaded_numel());
    update_compute_partition(group, 0, s.resident_numel);  // (after the swap: into the partition now current)
  }
  if (uploads) uploads_done_ = upload_rounded_partitions();
  else if (offload_) uploads_done_ = backend_.record_event();
  sync_params_after_update();
}

// The worker's rounded parameters (host_compute) into the device's compute partitions, unit by unit
// on the transfer queue toward the device, in the order the next forward reads them (the units
// sync_params_after_update gathers at once first: the persistent ones at stage 3). Each unit keeps
// its upload's event (UnitState::partition_upload): its gather orders the compute after it, so the
// next forward's first units run while the later ones upload (before, one copy of the whole
// offloaded partition stood on the compute stream ahead of the forward: 0.78 GB, about 14 ms, for
// opt-1.3b at ratio 0.3 on a GPU's link). Returns the last upload's event, which follows the others.
std::shared_ptr<BackendEvent> ZeroEngine::upload_rounded_partitions() {
  std::vector<int> order(static_cast<size_t>(store_.num_units()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(), [this](int unit) {
    return stage_ == 3 && store_.unit_numel(unit) < zero_.stage3_param_persistence_threshold;  // persistent first
  });
  std::shared_ptr<BackendEvent> last;
  for (int unit : order) {
    for (ParamGroup group : kTrainableGroups) {
      const GroupState& s = state(group);
      const UnitRange range = store_.unit_range(group, unit);
      const int64_t begin = range.begin / world_, numel = range.numel / world_;
      if (!numel || !s.host_compute.data() || s.resident(begin)) continue;
      last = backend_.transfer_async(compute_partition_view(s).rows(begin, numel),
                                     s.offloaded_rows(s.host_compute, compute_dtype_, begin, numel));
      units_[static_cast<size_t>(unit)].partition_upload = last;
    }
  }
  return last;
}

// ---- delayed parameter update (DPU) ---------------------------------------------------------------

bool ZeroEngine::delays(const OptimizerStep& step) const {
  return zero_.delayed_update_after >= 0 && step.update_number > zero_.delayed_update_after;
}

// The refusals: DPU runs the optimizer on the host beside the device's work, piece by piece
// with nothing but host memory.
void ZeroEngine::check_delayed_update() const {
  if (zero_.delayed_update_after < 0) return;
  const char* flag = "--delayed-param-update";
  ZT_CHECK(offload_, flag, " delays the CPU optimizer of ZeRO-Offload behind the next step: it needs "
           "zero_optimization.offload_optimizer.device \"cpu\" (the config has \"", zero_.offload_optimizer_device, "\")");
  ZT_CHECK(!fused_, flag, " with optimizer ", optimizer_->name(), ": it updates inside backward, not after it");
  ZT_CHECK(!optimizer_->needs_tensor_slices(), flag, " with optimizer ", optimizer_->name(), ": its per-tensor "
           "sums run collectives inside the update, which the background thread cannot (use adamw or sgd)");
  ZT_CHECK(!reduction_->compressed(), flag, " with optimizer ", optimizer_->name(), ": its compressed momentum "
           "exchange runs inside the update (use adamw or sgd)");
}

// This step's gradients on the host (copied bucket by bucket during backward, else now), then the
// optimizer over them on the worker. The pieces and their order are the synchronous update's,
// so each piece's bits are the same as there.
void ZeroEngine::start_delayed_update(const OptimizerStep& step, float grad_divisor) {
  std::vector<HostPiece> pieces;
  for (ParamGroup group : kTrainableGroups) {
    GroupState& s = state(group);
    if (!s.partition_numel) continue;
    if (s.resident_numel)  // partial offload: the resident part's gradients kept for its update, delayed alike
      backend_.copy_async(s.resident_grad_copy.view(store_.grad_dtype(), {s.resident_numel}),
                          reduction_->reduced(group).rows(0, s.resident_numel));
    for (const std::vector<UnitRange>& bucket : gather_pieces(group)) {
      if (s.resident(piece_begin(bucket))) continue;
      for (const std::vector<UnitRange>& units : update_pieces(bucket))
        if (const int64_t numel = piece_numel(units))
          pieces.push_back({group, units, piece_gradient(group, piece_begin(units), numel, true), Tensor()});
    }
  }
  if (partial_offload()) delayed_resident_ = DelayedStep{step, grad_divisor};
  // Copied during backward: complete since the gradient check read the device. Else (a last
  // micro-batch the schedule did not mark) piece_gradient just queued the copies: wait for them.
  if (!gradients_finished_) backend_.record_event()->wait();
  swap_delayed_buffers();
  // Only the host staging copy is rounded into on the worker (the twin whose last upload, of
  // the update before the one just made current, completed before this step's gradient check):
  // the compute partitions are what the next step's forward reads.
  for (HostPiece& piece : pieces)
    piece.rounded = rounding_target(piece.group, piece_begin(piece.units), piece.grad.numel(), false);
  post_host_pieces(std::move(pieces), step, grad_divisor, false);
}

// The update starting on the worker rounds into the staging twin that is not being uploaded
// (its event moves with it), and the next backward copies its gradients into the gradient twin
// that the update does not read (the views of the pieces were taken before: they keep theirs).
void ZeroEngine::swap_delayed_buffers() {
  for (ParamGroup group : kTrainableGroups) {
    GroupState& s = state(group);
    std::swap(s.host_grad, s.host_grad_spare);
    if (s.host_compute_spare.data()) std::swap(s.host_compute, s.host_compute_spare);  // (offload_param: no spare)
  }
  std::swap(uploads_done_, spare_uploads_done_);
}

// ---- per-bucket update ----------------------------------------------------------------------------

void ZeroEngine::check_bucket_update() const {
  if (!zero_.update_per_bucket) return;
  const char* flag = "--update-per-bucket";
  ZT_CHECK(offload_, flag, " runs ZeRO-Offload's CPU optimizer during the backward: it needs "
           "zero_optimization.offload_optimizer.device \"cpu\" (the config has \"", zero_.offload_optimizer_device, "\")");
  ZT_CHECK(zero_.delayed_update_after < 0, flag, " with --delayed-param-update: the one runs a step's CPU update "
           "during its own backward, the other during the next step's; choose one");
  ZT_CHECK(optimizer_->updates_elementwise(), flag, " with optimizer ", optimizer_->name(), ": its update of an "
           "element reads more than that element (per-tensor norms, a compressed exchange, or an update inside "
           "backward), so no bucket can be updated before every gradient is reduced (use adamw or sgd)");
  ZT_CHECK(compute_dtype_ != DType::F16, flag, " with fp16: its loss scaling skips the whole step when any gradient "
           "overflows, which is known only after the backward (use bf16 or fp32)");
}

void ZeroEngine::arm_bucket_update(const OptimizerStep& step) {
  ZT_CHECK(zero_.update_per_bucket, "ZeRO: arm_bucket_update without --update-per-bucket");
  ZT_CHECK(!host_update_in_flight_, "ZeRO: a step's per-bucket update armed while an update is in flight");
  bucket_step_ = step;
}

// After backward issued the next unit: the buckets copied before it are complete on the device
// (or will be, beside that unit's backward): their units go to the worker. One wait, for the
// last download's event, which follows every download before it (the transfer queue's order);
// the event stays for reduce_gradients' ordering of the compute after the downloads.
void ZeroEngine::post_copied_buckets() {
  grads_downloaded_->wait();
  for (CopiedBucket& bucket : copied_buckets_) {
    const GroupState& s = state(bucket.group);
    std::vector<HostPiece> pieces;
    for (const UnitRange& unit : store_.group(bucket.group).units) {
      const std::vector<UnitRange> units = {unit};
      const int64_t begin = piece_begin(units), numel = piece_numel(units);
      if (!numel || begin < bucket.begin || begin >= bucket.begin + bucket.numel) continue;
      pieces.push_back({bucket.group, units, host_grad_rows(s, begin, numel),
                        rounding_target(bucket.group, begin, numel, false)});
    }
    post_host_pieces(std::move(pieces), *bucket_step_, bucket_step_->grad_divisor, true);
  }
  copied_buckets_.clear();
}

// apply_update of a step whose update ran per bucket: `step` must be the armed one (its scalars
// were fixed before the backward).
void ZeroEngine::finish_bucket_update(const OptimizerStep& step) {
  ZT_CHECK(step.update_number == bucket_step_->update_number && step.lr == bucket_step_->lr &&
               step.grad_divisor == bucket_step_->grad_divisor,
           "ZeRO: the per-bucket update ran as update ", bucket_step_->update_number, " (lr ", bucket_step_->lr,
           ", divisor ", bucket_step_->grad_divisor, ") but the step applies update ", step.update_number, " (lr ",
           step.lr, ", divisor ", step.grad_divisor, ")");
  finish_delayed_update();
}

}  // namespace zt
