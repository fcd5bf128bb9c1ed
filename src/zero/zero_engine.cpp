// ZeRO stages 0-3 and offload: partitions, gradient buckets, the update and parameter sync.
#include "zero/zero_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <deque>
#include <exception>

#include "zero/compressed_reduction.h"
#include "zero/group_state.h"
#include "zero/host_worker.h"
#include "zero/quantized_collectives.h"
#include "zero/rank_major.h"

namespace zt {

namespace {
constexpr ParamGroup kAllGroups[] = {ParamGroup::Frozen, ParamGroup::Decay, ParamGroup::NoDecay};

// How a data_types.grad_accum_dtype value is named in messages: as the JSON spells it.
std::string grad_dtype_shown(DType dtype) { return cat("data_types.grad_accum_dtype \"", dtype_name(dtype), "\""); }

}  // namespace

std::string gradient_dtype_refusal(DType grad_dtype, DType compute_dtype, const Optimizer& optimizer) {
  if (grad_dtype == DType::F32) return "";
  if (grad_dtype != DType::BF16 && grad_dtype != DType::F16)
    return cat(grad_dtype_shown(grad_dtype), " is not supported: gradients are fp32, bf16 or fp16");
  // A backward GEMM writes a weight gradient in its inputs' dtype or in fp32 (backend.h "matmul").
  if (grad_dtype != compute_dtype)
    return cat(grad_dtype_shown(grad_dtype), " needs ", dtype_name(grad_dtype), " compute (\"", dtype_name(grad_dtype),
               "\": {\"enabled\": true}), but the run computes in ", dtype_name(compute_dtype),
               ": 16-bit gradients are stored in the compute dtype, which the backward GEMMs write (use \"fp32\", or "
               "enable ", dtype_name(grad_dtype), ")");
  if (optimizer.fuses_into_backward())
    return cat(grad_dtype_shown(grad_dtype), " with optimizer ", optimizer.name(), ": it applies each unit's gradient "
               "inside backward as soon as it is complete and keeps no gradient buffer to halve (use \"fp32\")");
  if (optimizer.exchanges_momentum())
    return cat(grad_dtype_shown(grad_dtype), " with optimizer ", optimizer.name(), ": its compressed steps keep each "
               "rank's local gradient and error feedback in fp32 (use \"fp32\")");
  return "";
}

void check_gradient_dtype(DType grad_dtype, DType compute_dtype, const Optimizer& optimizer) {
  const std::string refusal = gradient_dtype_refusal(grad_dtype, compute_dtype, optimizer);
  ZT_CHECK(refusal.empty(), refusal);
}

ZeroEngine::ZeroEngine(Backend& backend, Communicator& comm, ParamStore& store, const ZeroConfig& zero,
                       const OptimizerConfig& optimizer, DType compute_dtype, Communicator* host_comm)
    : backend_(backend), comm_(comm), store_(store), zero_(zero), optimizer_(make_optimizer(optimizer)), stage_(zero.stage),
      world_(comm.size()), rank_(comm.rank()), offload_(zero.offload_optimizer_device == "cpu"),
      offload_param_(zero.offload_param_device == "cpu"),
      compute_dtype_(compute_dtype), rounds_(compute_dtype != DType::F32) {
  fused_ = optimizer_->fuses_into_backward();
  check_gradient_dtype(store.grad_dtype(), compute_dtype, *optimizer_);
  ZT_CHECK(!fused_ || !offload_, "optimizer ", optimizer_->name(), " updates inside backward, on the device, and "
           "keeps no per-element state: zero_optimization.offload_optimizer must be none");
  ZT_CHECK(compute_dtype == DType::F32 || compute_dtype == DType::BF16 || compute_dtype == DType::F16,
           "compute dtype ", dtype_name(compute_dtype), " is not fp32, bf16 or fp16");
  ZT_CHECK(store.param_dtype() == compute_dtype, "ZeRO: the parameter store holds ", dtype_name(store.param_dtype()),
           " parameters but the compute dtype is ", dtype_name(compute_dtype));
  ZT_CHECK(stage_ >= 0 && stage_ <= 3, "zero_optimization.stage ", stage_, " is not 0, 1, 2 or 3");
  ZT_CHECK(store.partitions() == world_, "ZeRO: the parameter store is padded for ", store.partitions(),
           " partitions but the job has ", world_, " ranks");
  ZT_CHECK(!offload_ || stage_ >= 1, "zero_optimization.offload_optimizer.device \"cpu\" needs ZeRO stage 1, 2 or 3 "
           "(as in DeepSpeed); the config has stage 0");
  ZT_CHECK(zero.offload_param_device != "cpu" || stage_ == 3,
           "zero_optimization.offload_param.device \"cpu\" needs ZeRO stage 3; the config has stage ", stage_);
  ZT_CHECK(zero.reduce_bucket_size > 0 && zero.allgather_bucket_size > 0,
           "zero_optimization: reduce_bucket_size and allgather_bucket_size must be positive");
  check_partial_offload();
  // Host memory for what is offloaded: page-locked when pin_memory asks for it (the CUDA
  // backend's host backend), so that device<->host copies run at full speed.
  auto host_backend = [&](bool pin) { return pin ? backend_.make_host_backend() : backend_.make_pageable_host_backend(); };
  if (offload_) host_ = host_backend(zero.offload_optimizer_pin_memory);
  if (offload_param_) param_host_ = host_backend(zero.offload_param_pin_memory);
  Backend& state_backend = offload_ ? *host_ : backend_;
  // Where the compute-dtype partitions live: host memory with offload_param (stage 3).
  Backend& partition_backend = offload_param_ ? *param_host_ : backend_;
  const int64_t divisor = stage_ == 0 ? 1 : world_;
  for (ParamGroup group : kAllGroups) {
    auto state = std::make_unique<GroupState>();
    state->group = group;
    state->partition_numel = store.group(group).numel / divisor;
    const size_t bytes = static_cast<size_t>(state->partition_numel) * sizeof(float);
    if (group != ParamGroup::Frozen && bytes) {
      if (offload_) place_resident_part(*state, store.group(group).units, divisor);
      allocate_optimizer_state(*state, state_backend);
      const bool delayed = offload_ && zero.delayed_update_after >= 0;  // DPU: twins of the host buffers
      if (offload_) state->host_grad = Buffer(*host_, static_cast<size_t>(state->offloaded_numel()) * grad_bytes());
      if (delayed && state->resident_numel)
        state->resident_grad_copy = Buffer(backend_, static_cast<size_t>(state->resident_numel) * grad_bytes());
      if (delayed) state->host_grad_spare = Buffer(*host_, state->host_grad.bytes());
      if (stage_ >= 1 && (offload_ || rounds_ || offload_param_))
        state->compute_partition = Buffer(partition_backend, param_bytes(*state));
      if (offload_ && rounds_ && !offload_param_ && backend_.device() != Device::CPU) {
        const size_t offloaded_bytes = static_cast<size_t>(state->offloaded_numel()) * dtype_size(compute_dtype_);
        state->host_compute = Buffer(*host_, offloaded_bytes);
        if (delayed) state->host_compute_spare = Buffer(*host_, offloaded_bytes);
      } else if (offload_ && rounds_ && offload_param_ && delayed && backend_.device() != Device::CPU &&
                 state->compute_partition.data()) {
        // The host compute partition's twin: the delayed update rounds into it beside the next
        // step, whose gathers read the partition; then the two are swapped (no serial pass).
        state->host_compute = Buffer(partition_backend, param_bytes(*state));
      }
    }
    if (group == ParamGroup::Frozen && stage_ == 3 && bytes)
      state->compute_partition = Buffer(partition_backend, param_bytes(*state));
    groups_.push_back(std::move(state));
  }
  // Per-tensor state: whole on every rank, whatever the stage (a few vectors per tensor).
  tensor_state_.resize(store.entries().size());
  for (size_t e = 0; e < store.entries().size(); ++e) {
    const ParamEntry& entry = store.entries()[e];
    if (entry.group == ParamGroup::Frozen) continue;
    for (const TensorStateSpec& spec : optimizer_->tensor_state(entry.spec.shape)) {
      tensor_state_[e].emplace_back(state_backend, static_cast<size_t>(spec.numel) * sizeof(float));
      state_backend.fill(flat_f32(tensor_state_[e].back(), spec.numel), 0.0f);
    }
  }
  units_.resize(static_cast<size_t>(store.num_units()));
  check_zeropp();
  if (world_ > 1 && (zero.zero_hpz_partition_size > 1 || zero.zero_quantized_gradients)) open_node_groups();
  ReductionContext context;
  context.backend = &backend_;
  context.comm = &comm_;
  context.store = &store_;
  context.zero = zero_;
  context.stage = stage_;
  context.world = world_;
  context.rank = rank_;
  context.compute_dtype = compute_dtype_;
  context.nodes = nodes_.get();
  context.slices_final = [this](ParamGroup group, int64_t begin, Tensor slices) { slices_final(group, begin, slices); };
  context.released = [this](int unit) { units_[static_cast<size_t>(unit)].grads_live = false; };
  reduction_ = make_gradient_reduction(context, *optimizer_, optimizer, host_comm);
  check_delayed_update();
  check_bucket_update();
  if (offload_ && (zero.delayed_update_after >= 0 || zero.update_per_bucket)) worker_ = std::make_unique<HostWorker>();
  grads_in_flight_ = fused_ || reduction_->reduces_per_micro_batch();
  allocate_update_scratch(state_backend);
}

// offload_optimizer.ratio < 1 (partial offload; stage 3, checked by check_partial_offload): the
// group's first units stay on the device, as many as keep their slices within (1 - ratio) of the
// partition (DeepSpeed keeps its first sub-groups, int((1 - ratio) x count) of them).
void ZeroEngine::place_resident_part(GroupState& s, const std::vector<UnitRange>& units, int64_t divisor) const {
  const double ratio = zero_.offload_optimizer_ratio;
  if (ratio >= 1.0) return;
  const auto limit = static_cast<int64_t>((1.0 - ratio) * static_cast<double>(s.partition_numel));
  for (const UnitRange& unit : units) {
    const int64_t slice = unit.numel / divisor;
    if (s.resident_numel + slice > limit) break;
    s.resident_numel += slice;
    ++s.resident_units;
  }
  if (!s.resident_numel) s.resident_units = 0;  // (only units without elements here: nothing stays)
}

bool ZeroEngine::partial_offload() const {
  for (ParamGroup group : kTrainableGroups)
    if (groups_[static_cast<size_t>(group)]->resident_numel) return true;
  return false;
}

// The refusals: the device-resident part is updated on the device beside the host's, after the
// backward, element by element.
void ZeroEngine::check_partial_offload() const {
  const double ratio = zero_.offload_optimizer_ratio;
  ZT_CHECK(ratio >= 0.0 && ratio <= 1.0, "zero_optimization.offload_optimizer.ratio ", ratio, " is not in [0, 1]");
  if (ratio >= 1.0 || !offload_) return;
  const std::string key = cat("zero_optimization.offload_optimizer.ratio ", ratio);
  ZT_CHECK(stage_ == 3, key, " (partial offload) needs ZeRO stage 3, as in DeepSpeed; the config has stage ", stage_);
  ZT_CHECK(!zero_.update_per_bucket, key, " with --update-per-bucket: the per-bucket update runs on the host "
           "alone; offload all optimizer states (ratio 1) or drop the flag");
  ZT_CHECK(optimizer_->updates_elementwise(), key, " with optimizer ", optimizer_->name(), ": its update of an "
           "element reads more than that element (per-tensor norms), which the two parts would have to share "
           "(use adamw or sgd, or ratio 1)");
}

// The master and the optimizer's state buffers (zeroed): the device-resident part on the device,
// the rest on `state_backend` (the host with offload).
void ZeroEngine::allocate_optimizer_state(GroupState& s, Backend& state_backend) {
  const auto floats = [](int64_t numel) { return static_cast<size_t>(numel) * sizeof(float); };
  const size_t states = optimizer_->state_names().size();
  auto allocate = [&](Backend& on, int64_t numel, Buffer& master, std::vector<Buffer>& state) {
    if (!numel) return;
    master = Buffer(on, floats(numel));
    for (size_t k = 0; k < states; ++k) {
      state.emplace_back(on, floats(numel));
      on.fill(flat_f32(state.back(), numel), 0.0f);
    }
  };
  allocate(backend_, s.resident_numel, s.resident_master, s.resident_state);
  allocate(state_backend, s.offloaded_numel(), s.master, s.state);
  if (s.state.empty()) s.state.resize(states);  // (all resident: empty offloaded parts, state_rows indexes them)
}

// The update's scratch: 16-bit gradients are widened piece by piece for the optimizer, which
// reads fp32 (wide_grad_); a fused optimizer's reduce-scatter output of one unit (fused_scratch_).
void ZeroEngine::allocate_update_scratch(Backend& state_backend) {
  if (store_.grad_dtype() != DType::F32) {
    int64_t largest = 0, largest_resident = 0;  // (the device-resident part's pieces: widened on the device)
    for (ParamGroup group : kTrainableGroups)
      for (const std::vector<UnitRange>& bucket : gather_pieces(group))
        for (const std::vector<UnitRange>& units : update_pieces(bucket)) {
          int64_t& into = offload_ && state(group).resident(piece_begin(units)) ? largest_resident : largest;
          into = std::max(into, piece_numel(units));
        }
    if (largest) wide_grad_ = Buffer(state_backend, static_cast<size_t>(largest) * sizeof(float));
    if (largest_resident && !optimizer_->fuses_offload_passes(backend_))
      resident_wide_grad_ = Buffer(backend_, static_cast<size_t>(largest_resident) * sizeof(float));
  }
  if (fused_ && stage_ >= 1 && world_ > 1) {  // one unit's slice of the largest group range
    int64_t largest = 0;
    for (int unit = 0; unit < store_.num_units(); ++unit)
      for (ParamGroup group : kTrainableGroups) largest = std::max(largest, store_.unit_range(group, unit).numel / world_);
    if (largest) fused_scratch_ = Buffer(backend_, static_cast<size_t>(largest) * sizeof(float));
  }
}

ZeroEngine::~ZeroEngine() {
  // Complete what is in flight before the buffers it writes go away; unless the engine dies of
  // an error: then the job is ending (the top-level handler aborts it), and a collective whose
  // peer failed or hangs would hold this rank for a whole --comm-timeout per bucket in flight.
  worker_.reset();  // runs what was posted (host memory only) before the buffers it writes go away
  if (std::uncaught_exceptions() > 0) return;
  try {
    for (UnitState& unit : units_)
      for (Pending& pending : unit.inflight) pending->wait();
    settle_host_uploads();
    // Asynchronous host copies must not outlive the (pinned) host buffers they read or write.
    for (BackendEvent* event : {grads_downloaded_.get(), host_grads_ready_.get(), uploads_done_.get(), spare_uploads_done_.get()})
      if (event) event->wait();
  } catch (...) {  // unwinding from another error: that one is reported
  }
}

// One rank: an all-gather is a copy; done on the backend, it stays on the device (no
// communicator round trip, which for GPU buffers would go through the host). Queued: with
// offload_param `in` is the pinned host partition, and copy() would stage each unit's upload
// through a host memcpy (up to 64 MiB) or wait for the stream (larger: a 1.3B model's blocks),
// so a prefetch would not overlap the compute. The host rewrites that partition only in the
// update, after the step's gradient check has waited for the device (every gather done), or in
// the delayed update's twin, which no gather reads.
Pending ZeroEngine::all_gather_async(Tensor out, Tensor in) {
  if (world_ > 1) return comm_.all_gather_async(out, in);
  if (out.data != in.data) backend_.copy_async(out, in);
  return completed_collective();
}

ZeroEngine::GroupState& ZeroEngine::state(ParamGroup group) { return *groups_[static_cast<size_t>(group)]; }

size_t ZeroEngine::param_bytes(const GroupState& s) const {
  return static_cast<size_t>(s.partition_numel) * dtype_size(compute_dtype_);
}

Tensor ZeroEngine::compute_partition_view(const GroupState& s) const {
  return s.compute_partition.view(compute_dtype_, {s.partition_numel});
}

Tensor ZeroEngine::gather_source(ParamGroup group) const {
  const GroupState& s = *groups_[static_cast<size_t>(group)];
  if (s.compute_partition.data()) return compute_partition_view(s);
  return s.master_rows(0, s.partition_numel);  // fp32 compute without offload: the master itself
}

// Copies this rank's slice of every unit of `full` into `partition` (at unit.begin / W).
static void copy_own_slices(Backend& backend, Tensor partition, Tensor full, const std::vector<UnitRange>& units,
                            int world, int rank) {
  for (const UnitRange& unit : units) {
    const int64_t n = unit.numel / world;
    if (n) backend.copy(partition.rows(unit.begin / world, n), full.rows(unit.begin + rank * n, n));
  }
}

StoreResidency zero_store_residency(const ZeroConfig& zero, int world, const Optimizer& optimizer) {
  StoreResidency residency;
  residency.params = zero.stage < 3;
  residency.grads = !optimizer.fuses_into_backward() && (zero.stage < 2 || world == 1 || optimizer.exchanges_momentum());
  return residency;
}

// The store holds the initial weights in the compute dtype (rounded as loaded); the fp32 master
// starts from those values, as DeepSpeed's does from the 16-bit module.
void ZeroEngine::init_from_store() {
  for (int unit = 0; unit < store_.num_units(); ++unit) init_unit_from_store(unit);
  finish_init();
}

void ZeroEngine::init_unit_from_store(int unit) {
  for (ParamGroup group : kAllGroups) {
    GroupState& s = state(group);
    const UnitRange range = store_.unit_range(group, unit);
    if (!s.partition_numel || !range.numel) continue;
    const Tensor full = store_.group_params(group);
    if (group != ParamGroup::Frozen) {  // into the master's part that holds the unit's slice
      const int64_t n = stage_ == 0 ? range.numel : range.numel / world_;
      const int64_t from = stage_ == 0 ? range.begin : range.begin + rank_ * n;
      if (n) backend_.copy(s.master_rows(range.begin / (stage_ == 0 ? 1 : world_), n), full.rows(from, n));
    } else if (stage_ == 3) {
      copy_own_slices(backend_, compute_partition_view(s), full, {range}, world_, rank_);
    }
  }
  if (stage_ == 3) {
    live_gathered_ += store_.unit_numel(unit);
    if (store_.unit_numel(unit) >= zero_.stage3_param_persistence_threshold) {
      discard_unit_params(unit);  // its slice is in this rank's partition now
      units_[static_cast<size_t>(unit)].gathered = false;
    }
  }
}

void ZeroEngine::finish_init() {
  peak_gathered_ = live_gathered_;  // the persistent units: gathering starts from here
  update_compute_partitions();
  if (grads_in_flight_) {
    for (int unit = 0; unit < store_.num_units(); ++unit) {
      for (ParamGroup group : kTrainableGroups) {
        const UnitRange range = store_.unit_range(group, unit);
        if (range.numel) backend_.discard(store_.group_grads(group).rows(range.begin, range.numel));
      }
      units_[static_cast<size_t>(unit)].grads_live = false;
    }
  }
}

void ZeroEngine::begin_step(int64_t update_number) {
  boundary_ = false;
  fused_pass_ = FusedPass::None;
  if (!grads_in_flight_) store_.zero_grads();
  grads_downloaded_.reset();  // (the compute was ordered after it: reduce_gradients)
  reduction_->begin_step(update_number);
}

// ---- stage 3: parameters ------------------------------------------------------------------

void ZeroEngine::gather_unit(int unit, bool async) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  order_after_partition_upload(unit);
  for (ParamGroup group : kAllGroups) {
    const UnitRange range = store_.unit_range(group, unit);
    if (!range.numel) continue;
    Tensor out = store_.group_params(group).rows(range.begin, range.numel);
    backend_.commit(out);  // its pages were given back when the unit was released
    Tensor in = gather_source(group).rows(range.begin / world_, range.numel / world_);
    if (offload_param_) {
      gather_offloaded_range(u, group, range, out, in);
      continue;
    }
    u.inflight.push_back(gather_range(u, static_cast<int>(group), out, in));
  }
  u.capture_secondary = hpz_ && !u.secondary.empty() && !u.secondary_current;
  u.gathered = true;
  live_gathered_ += store_.unit_numel(unit);
  peak_gathered_ = std::max(peak_gathered_, live_gathered_);
  if (!async) finish_prefetch(unit);
}

bool ZeroEngine::gathers_from_secondary(const UnitState& u) const { return hpz_ && u.secondary_current && !exact_gathers_; }

bool ZeroEngine::gathers_in_place(const UnitState& u) const {
  return world_ > 1 && !gathers_from_secondary(u) && !(zero_.zero_quantized_weights && !exact_gathers_);
}

// offload_param: one group's range of a unit from the host partition's slice `in` [range / W], or
// rounded from the device master's slice where that is on the device (the same bits as the host
// copy). On one rank the gather is that copy: an upload beside the compute, or the rounding in
// place. On several an exact gather puts this rank's slice in its place in `out` and gathers in
// place: the upload beside the compute, the collective waiting for it (all_gather_from_host_async).
// hpZ's gather from a current secondary partition reads no slice; qwZ's reads a device one.
void ZeroEngine::gather_offloaded_range(UnitState& u, ParamGroup group, UnitRange range, Tensor out, Tensor in) {
  const Tensor master = device_master_rows(group, range.begin / world_, range.numel / world_);  // fp32 or empty
  const int group_index = static_cast<int>(group);
  if (world_ == 1) {
    if (master.data) backend_.copy(out, master);
    else u.host_uploads.push_back(backend_.transfer_async(out, in));
    return;
  }
  if (gathers_in_place(u) && !master.data) {
    u.inflight.push_back(comm_.all_gather_from_host_async(backend_, out, in));
    u.gathers_read_host = true;
    return;
  }
  if (gathers_in_place(u)) {
    const Tensor own = out.reshaped({out.numel()}).rows(rank_ * in.numel(), in.numel());  // [range / W]
    backend_.copy(own, master);
    u.inflight.push_back(gather_range(u, group_index, out, own));
    return;
  }
  if (!gathers_from_secondary(u)) {  // qwZ: a device slice, rounded from the master, else uploaded
    u.uploads.emplace_back(backend_, in.bytes());
    const Tensor slice = u.uploads.back().view(in.dtype, {in.numel()});
    if (master.data)
      backend_.copy(slice, master);
    else
      backend_.copy_async(slice, in);  // the gather after it is ordered on the device
    in = slice;
  }
  u.inflight.push_back(gather_range(u, group_index, out, in));
}

void ZeroEngine::order_after_partition_upload(int unit) {
  std::shared_ptr<BackendEvent>& upload = units_[static_cast<size_t>(unit)].partition_upload;
  if (upload) backend_.wait_for(*upload);
  upload.reset();
}

void ZeroEngine::order_after_partition_uploads() {
  for (int unit = 0; unit < store_.num_units(); ++unit) order_after_partition_upload(unit);
}

// One group's range of a unit: out [range] <- every rank's in [range / W]. hpZ with a current
// secondary partition: within the node from it; else over all ranks. With qwZ both as int8 blocks
// (DeepSpeed's hpZ + qwZ quantizes the node's gathers too).
Pending ZeroEngine::gather_range(UnitState& u, int group_index, Tensor out, Tensor in) {
  const bool quantized = zero_.zero_quantized_weights && !exact_gathers_;
  if (gathers_from_secondary(u)) {
    const Buffer& secondary = u.secondary[static_cast<size_t>(group_index)];
    const Tensor share = secondary.view(compute_dtype_, {out.numel() / nodes_->ranks_per_node});  // [range / R]
    if (quantized && nodes_->ranks_per_node > 1) return quantized_all_gather_async(backend_, *nodes_->intra, out, share);
    return nodes_->intra->all_gather_async(out, share);
  }
  if (quantized && world_ > 1) return quantized_all_gather_async(backend_, comm_, out, in);
  return all_gather_async(out, in);  // one rank: a copy, host -> device when offloaded
}

void ZeroEngine::finish_prefetch(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  for (Pending& pending : u.inflight) pending->wait();
  u.inflight.clear();
  u.gathers_read_host = false;
  for (const std::unique_ptr<BackendEvent>& upload : u.host_uploads) backend_.wait_for(*upload);
  u.host_uploads.clear();
  u.uploads.clear();
  if (u.capture_secondary) capture_secondary(unit);
}

// offload_param: this rank's slice [begin, begin + numel) of a group's fp32 master where that is
// device memory (no optimizer offload, or the resident part of offload_optimizer.ratio < 1), else
// empty. A gather rounds it on the device rather than uploading the host partition's 16-bit copy:
// the same bits (that copy is the master rounded, rewritten whenever the master is), no link
// traffic, and no download of the updated master to the host after the update (update_compute_partition).
Tensor ZeroEngine::device_master_rows(ParamGroup group, int64_t begin, int64_t numel) {
  GroupState& s = state(group);
  if (group == ParamGroup::Frozen || (offload_ && !s.resident(begin))) return {};  // (frozen: no master)
  const Tensor master = s.master_rows(begin, numel);
  return master.device == Device::CPU ? Tensor() : master;
}

// A gather from the pinned host partition (offload_param: one rank's transfer, or on several the
// upload that all_gather_from_host_async makes before its collective) reads it until that ends, and
// finish_prefetch only orders the compute after it. The host rewrites the partition
// after a wait for the device that follows every gather the step used; a gather started but not
// yet used is waited for here (none in a training step: each pass uses what it prefetches).
void ZeroEngine::settle_host_uploads() {
  for (UnitState& u : units_) {
    for (const std::unique_ptr<BackendEvent>& upload : u.host_uploads) upload->wait();
    u.host_uploads.clear();
    if (u.gathers_read_host)  // (finish_prefetch waits for them again: a wait completes once)
      for (Pending& gather : u.inflight) gather->wait();
    u.gathers_read_host = false;
  }
}

// ---- ZeRO++ --------------------------------------------------------------------------------------

// ZeRO++ is stage 3's (as in DeepSpeed); qgZ replaces the exact reduce-scatter, so not where another
// reduction runs (an optimizer fused into backward, a compressed momentum exchange).
void ZeroEngine::check_zeropp() const {
  if (!zero_.zeropp()) return;
  ZT_CHECK(stage_ == 3, "zero_optimization: ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, "
           "zero_quantized_gradients) needs stage 3, as in DeepSpeed; the config has stage ", stage_);
  const int hpz = zero_.zero_hpz_partition_size;
  ZT_CHECK(hpz == 1 || world_ == 1 || world_ % hpz == 0, "zero_optimization.zero_hpz_partition_size ", hpz,
           " must divide the ", world_, " ranks (it is the ranks per node)");
  ZT_CHECK(hpz == 1 || zero_.ranks_per_node == 0 || zero_.ranks_per_node == hpz,
           "zero_optimization.zero_hpz_partition_size ", hpz, " differs from --ranks-per-node ", zero_.ranks_per_node,
           ": hpZ's secondary partition spans the ranks of a node");
  if (zero_.zero_quantized_gradients) {
    ZT_CHECK(!fused_, "zero_optimization.zero_quantized_gradients with optimizer ", optimizer_->name(),
             ": it reduces each unit inside backward, not through qgZ's all-to-alls");
    ZT_CHECK(!optimizer_->exchanges_momentum(), "zero_optimization.zero_quantized_gradients with optimizer ",
             optimizer_->name(), ": its compressed momentum exchange replaces the gradient reduction");
  }
}

// hpZ's and qgZ's node groups: --ranks-per-node's layout, else the machines' own (MPI's
// shared-memory groups, comm/node_groups.h); hpZ's secondary partition over the node's ranks.
void ZeroEngine::open_node_groups() {
  nodes_ = std::make_unique<NodeGroups>(split_by_node(comm_, zero_.ranks_per_node));
  hpz_ = zero_.zero_hpz_partition_size > 1;
  ZT_CHECK(!hpz_ || nodes_->ranks_per_node == zero_.zero_hpz_partition_size, "zero_optimization.zero_hpz_partition_size ",
           zero_.zero_hpz_partition_size, " differs from the ", nodes_->ranks_per_node, " ranks per node of this job "
           "(the ranks that share a machine's memory): hpZ's secondary partition spans the ranks of a node, so "
           "set it to ", nodes_->ranks_per_node, " (or lay the nodes out with --ranks-per-node)");
  if (hpz_) make_secondary_partition();
}

// hpZ: each non-persistent unit's share [range / R] per group, on the device (what the memory
// model counts as parameters beside the partitions).
void ZeroEngine::make_secondary_partition() {
  const int64_t per_node = nodes_->ranks_per_node;
  for (int unit = 0; unit < store_.num_units(); ++unit) {
    if (store_.unit_numel(unit) < zero_.stage3_param_persistence_threshold) continue;  // persistent: never gathered again
    UnitState& u = units_[static_cast<size_t>(unit)];
    for (ParamGroup group : kAllGroups) {
      const int64_t numel = store_.unit_range(group, unit).numel / per_node;
      u.secondary.emplace_back(backend_, static_cast<size_t>(numel) * dtype_size(compute_dtype_));
    }
  }
}

void ZeroEngine::capture_secondary(int unit) {
  UnitState& u = units_[static_cast<size_t>(unit)];
  const int per_node = nodes_->ranks_per_node, place = nodes_->intra->rank();
  for (ParamGroup group : kAllGroups) {
    const UnitRange range = store_.unit_range(group, unit);
    if (!range.numel) continue;
    const int64_t share = range.numel / per_node;
    const Buffer& secondary = u.secondary[static_cast<size_t>(group)];
    backend_.copy(secondary.view(compute_dtype_, {share}), store_.group_params(group).rows(range.begin + place * share, share));
  }
  u.secondary_current = true;
  u.capture_secondary = false;
}

// After an update: the secondary partition is stale (a gather still in flight completes first, so
// that its capture cannot make it current again).
void ZeroEngine::invalidate_secondary(int unit) {
  finish_prefetch(unit);
  units_[static_cast<size_t>(unit)].secondary_current = false;
}

void ZeroEngine::discard_unit_params(int unit) {
  for (ParamGroup group : kAllGroups) {
    const UnitRange range = store_.unit_range(group, unit);
    if (range.numel) backend_.discard(store_.group_params(group).rows(range.begin, range.numel));
  }
  live_gathered_ -= store_.unit_numel(unit);
}

bool ZeroEngine::keep_after_release(int unit) const {
  const int64_t numel = store_.unit_numel(unit);
  if (numel < zero_.stage3_param_persistence_threshold) return true;  // persistent: never released
  if (units_[static_cast<size_t>(unit)].last_use != UnitUse::Forward) return false;
  // Released in forward, the unit is next used in backward after every later unit:
  // DeepSpeed's reuse distance is the parameters fetched in between.
  int64_t distance = 0;
  for (int later = unit + 1; later < store_.num_units(); ++later) distance += store_.unit_numel(later);
  return distance < zero_.stage3_max_reuse_distance && live_gathered_ <= zero_.stage3_max_live_parameters;
}

void ZeroEngine::acquire(int unit, UnitUse use) {
  // A unit reads its own parameters and those of its ties (ParamStore::unit_reads: a tied head
  // reads the token embedding's unit); its backward writes their gradients.
  const std::vector<int>& reads = store_.unit_reads(unit);
  if (stage_ == 3 && use != UnitUse::GradientOnly) {
    for (int read : reads) {
      UnitState& r = units_[static_cast<size_t>(read)];
      r.last_use = use;
      if (!r.gathered) gather_unit(read, false);
      finish_prefetch(read);
    }
    prefetch_next(unit, use);
  }
  if (grads_in_flight_ && use != UnitUse::Forward) {
    for (int written : reads) {
      UnitState& w = units_[static_cast<size_t>(written)];
      if (w.grads_live) continue;
      for (ParamGroup group : kTrainableGroups) {
        const UnitRange range = store_.unit_range(group, written);
        if (!range.numel) continue;
        Tensor grads = store_.group_grads(group).rows(range.begin, range.numel);
        backend_.commit(grads);  // given back when the unit's previous gradients were reduced
        backend_.fill(grads, 0.0f);
      }
      w.grads_live = true;
    }
  }
}

// Stage 3: starts gathering what the next unit of this pass reads, as DeepSpeed's coordinator
// would with stage3_prefetch_bucket_size and stage3_max_live_parameters (stage3_prefetches: until
// 2026-11-28 a unit larger than the bucket was never prefetched, so opt-1.3b's blocks, 50.4M
// parameters against the 5e7 default, were each gathered when needed, with nothing to overlap
// with; with offload_param each upload then stood between two blocks). The pass goes forward 0..U-1 and
// backward U-1..0; a unit whose backward reads no parameters (an embedding table) is skipped.
void ZeroEngine::prefetch_next(int unit, UnitUse use) {
  const int next = use == UnitUse::Forward ? unit + 1 : unit - 1;
  if (next < 0 || next >= store_.num_units()) return;
  if (use != UnitUse::Forward && !store_.unit_backward_reads_params(next)) return;
  int64_t missing = 0;
  for (int read : store_.unit_reads(next))
    if (!units_[static_cast<size_t>(read)].gathered) missing += store_.unit_numel(read);
  if (!stage3_prefetches(missing, live_gathered_, zero_.stage3_prefetch_bucket_size, zero_.stage3_max_live_parameters)) return;
  for (int read : store_.unit_reads(next))
    if (!units_[static_cast<size_t>(read)].gathered) gather_unit(read, true);
}

void ZeroEngine::release(int unit) {
  if (stage_ != 3) return;
  for (int read : store_.unit_reads(unit)) {
    UnitState& r = units_[static_cast<size_t>(read)];
    if (!r.gathered || keep_after_release(read)) continue;
    finish_prefetch(read);
    discard_unit_params(read);
    r.gathered = false;
  }
}

// ---- gradients ------------------------------------------------------------------------------

void ZeroEngine::begin_micro_batch(bool last) {
  boundary_ = last;
  reduction_->begin_micro_batch(last);
}

// The reduction strategy decides what a completed unit's gradients go through (gradient_reduction.h).
void ZeroEngine::gradients_ready(int unit) {
  if (fused_) return fused_unit_ready(unit);
  if (!copied_buckets_.empty()) post_copied_buckets();  // the per-bucket update: copied before this unit's backward
  reduction_->unit_ready(unit);
}

// (Under DPU too: the update in flight reads the other host copy, host_grad_spare.) With the
// per-bucket update armed, the worker updates these slices once the copy is done (offload_overlap.cpp).
// The copy runs on the transfer queue toward the host, beside the backward's compute (on a GPU
// the compute queue would stall for it: 29 ms of an opt-1.3b step at ratio 0.3, 96 ms with the
// whole optimizer offloaded); downloads complete in order, so the last one's event covers all.
// Nothing writes the slices again before reduce_gradients orders the compute after them.
void ZeroEngine::slices_final(ParamGroup group, int64_t begin, Tensor slices) {
  if (!offload_) return;
  // (offload_optimizer.ratio < 1: only what is past the device-resident part goes to the host)
  const GroupState& s = state(group);
  const int64_t skip = std::clamp<int64_t>(s.resident_numel - begin, 0, slices.numel());
  if (skip == slices.numel()) return;
  grads_downloaded_ = backend_.transfer_async(host_grad_rows(s, begin + skip, slices.numel() - skip),
                                              slices.rows(skip, slices.numel() - skip));
  if (bucket_step_) copied_buckets_.push_back({group, begin, slices.numel()});
}

// The gradient check that follows reads the device once for the step (its one host wait): with
// the compute queue behind the downloads, that wait covers them too, and the next step's
// backward cannot write gradients a download still reads.
// The event stays until the next step begins (post_copied_buckets may still wait for it).
void ZeroEngine::order_after_grad_downloads() {
  if (grads_downloaded_) backend_.wait_for(*grads_downloaded_);
}

size_t ZeroEngine::grad_bytes() const { return dtype_size(store_.grad_dtype()); }

Tensor ZeroEngine::host_grad_rows(const GroupState& s, int64_t begin, int64_t numel) const {
  return s.offloaded_rows(s.host_grad, store_.grad_dtype(), begin, numel);
}

void ZeroEngine::end_micro_batch() { reduction_->end_micro_batch(); }

void ZeroEngine::reduce_gradients() {
  if (fused_) {  // reduced (and applied) unit by unit during backward
    ZT_CHECK(fused_pass_ != FusedPass::None, "ZeRO: optimizer ", optimizer_->name(),
             " needs begin_norm_pass or begin_update_pass before its backward");
    return;
  }
  // True when every slice was rounded (and offloaded) as its bucket completed in the last backward.
  gradients_finished_ = reduction_->finish();
  order_after_grad_downloads();
  if (gradients_finished_ && offload_) host_grads_ready_ = backend_.record_event();
}

bool ZeroEngine::gradients_overflow() {
  if (fused_) return comm_.all_reduce_max(fused_overflow_ ? 1.0 : 0.0) > 0.0;
  return reduction_->overflow();
}

ZeroEngine::GradientCheck ZeroEngine::check_gradients() {
  if (fused_) {  // measured during backward: the overflow flag first, the norm only without one
    const bool overflow = gradients_overflow();
    return {overflow ? std::numeric_limits<double>::quiet_NaN() : gradient_norm(), overflow};
  }
  const double norm = reduction_->gradient_norm();
  return {norm, !std::isfinite(norm)};
}

double ZeroEngine::gradient_norm() {
  if (fused_) return std::sqrt(stage_ >= 1 ? comm_.all_reduce_sum(fused_squares_) : fused_squares_);
  return reduction_->gradient_norm();
}

// ---- the compressed strategy's checkpoint buffers (1-bit Adam, 0/1 Adam) -------------------------

std::vector<ZeroEngine::ExchangeViews> ZeroEngine::exchange_views() {
  std::vector<ExchangeViews> views;
  if (CompressedReduction* compressed = reduction_->compressed())
    for (CompressedReduction::Views& view : compressed->views())
      views.push_back({view.group, std::move(view.names), std::move(view.buffers)});
  return views;
}

ZeroEngine::ExchangeScalars ZeroEngine::exchange_scalars() const {
  CompressedReduction* compressed = reduction_->compressed();
  if (!compressed) return {};
  const CompressedReduction::Scalars scalars = compressed->scalars();
  return {scalars.replica, scalars.lr_sum};
}

void ZeroEngine::exchange_loaded(const ExchangeScalars& scalars) {
  CompressedReduction* compressed = reduction_->compressed();
  if (!compressed) return;
  compressed->restore_scalars({scalars.replica, scalars.lr_sum});
  if (scalars.replica)
    for (ParamGroup group : kTrainableGroups)
      if (state(group).partition_numel) compressed->replica_to_params(group, store_.group_params(group));
}

std::vector<ZeroEngine::PartitionViews> ZeroEngine::partition_views() {
  std::vector<PartitionViews> views;
  for (ParamGroup group : kTrainableGroups) {
    GroupState& s = state(group);
    if (!s.partition_numel) continue;
    PartitionViews view{group, {}};
    auto add_part = [&](int64_t begin, int64_t numel) {
      if (!numel) return;
      PartitionViews::Part part{begin, s.master_rows(begin, numel), {}};
      for (size_t k = 0; k < s.state.size(); ++k) part.state.push_back(s.state_rows(k, begin, numel));
      view.parts.push_back(std::move(part));
    };
    add_part(0, s.resident_numel);  // the device-resident part (offload_optimizer.ratio < 1), then the rest
    add_part(s.resident_numel, s.offloaded_numel());
    views.push_back(std::move(view));
  }
  return views;
}

std::vector<ZeroEngine::TensorStateViews> ZeroEngine::tensor_state_views() {
  std::vector<TensorStateViews> views;
  for (size_t e = 0; e < store_.entries().size(); ++e) {
    if (tensor_state_[e].empty()) continue;
    const ParamEntry& entry = store_.entries()[e];
    TensorStateViews view{entry.spec.name, {}, {}};
    const std::vector<TensorStateSpec> specs = optimizer_->tensor_state(entry.spec.shape);
    for (size_t k = 0; k < specs.size(); ++k) {
      view.names.push_back(specs[k].name);
      view.state.push_back(flat_f32(tensor_state_[e][k], specs[k].numel));
    }
    views.push_back(std::move(view));
  }
  return views;
}

void ZeroEngine::add_tensor_slices(OptimizerPiece& piece, ParamGroup group, std::span<const UnitRange> units,
                                   bool sliced) {
  piece.tensors = partition_tensor_slices(store_, group, units, sliced ? world_ : 1, sliced ? rank_ : 0);
  for (TensorSlice& tensor : piece.tensors) {
    const std::vector<TensorStateSpec> specs = optimizer_->tensor_state(tensor.shape);
    const std::vector<Buffer>& buffers = tensor_state_[static_cast<size_t>(tensor.entry)];
    for (size_t k = 0; k < specs.size(); ++k) tensor.state.push_back(flat_f32(buffers[k], specs[k].numel));
  }
  // Without slices every rank holds the tensors whole (stage 0's gradients are all-reduced):
  // its own sums are the totals.
  piece.sum_over_ranks = [this, sliced](std::span<double> values) {
    if (sliced) comm_.all_reduce_scalars(values);
  };
  piece.sum_tensor_over_ranks = [this, sliced](Tensor values) {
    if (sliced) comm_.all_reduce_sum(values);
  };
}

// Exact values, not qwZ's int8 nor hpZ's copy of them: what is written out. A unit gathered
// through qwZ is gathered again.
void ZeroEngine::gather_full_params() {
  finish_delayed_update();
  if (stage_ != 3) return;
  exact_gathers_ = true;
  for (int unit = 0; unit < store_.num_units(); ++unit) {
    UnitState& u = units_[static_cast<size_t>(unit)];
    finish_prefetch(unit);
    if (u.gathered && zero_.zero_quantized_weights && world_ > 1) {
      discard_unit_params(unit);
      u.gathered = false;
    }
    if (!u.gathered) gather_unit(unit, false);
  }
  exact_gathers_ = false;
}

// ---- fused optimizers (LOMO, AdaLomo) --------------------------------------------------------------

void ZeroEngine::begin_norm_pass() {
  ZT_CHECK(fused_, "ZeRO: begin_norm_pass is for optimizers fused into backward, not ", optimizer_->name());
  fused_pass_ = FusedPass::Norm;
  fused_squares_ = 0.0;
  fused_overflow_ = false;
}

void ZeroEngine::begin_update_pass(const OptimizerStep& step) {
  ZT_CHECK(fused_, "ZeRO: begin_update_pass is for optimizers fused into backward, not ", optimizer_->name());
  for (int unit = 0; unit < store_.num_units(); ++unit) finish_prefetch(unit);
  fused_pass_ = FusedPass::Update;
  fused_step_ = step;
  fused_squares_ = 0.0;
  fused_overflow_ = false;
}

// The unit's gradient is complete: reduce it (this rank's share: all of it at stage 0, its slice
// from stage 1), measure it, and in an update pass apply the optimizer to the matching master
// range; then give the gradient's memory back. Group by group: a group's gradient is discarded
// before the next group's read waits for the device, so that the physical pool may reuse its
// memory for the next unit (physical_pool.h: a wait makes discarded memory reusable; reading
// every group at once would leave the last discard after the last wait, and a LOMO step would
// hold one more unit's gradients).
void ZeroEngine::fused_unit_ready(int unit) {
  ZT_CHECK(fused_pass_ != FusedPass::None, "ZeRO: optimizer ", optimizer_->name(),
           " needs begin_norm_pass or begin_update_pass before its backward");
  bool updated = false;
  for (ParamGroup group : kTrainableGroups) {
    GroupState& s = state(group);
    const UnitRange range = store_.unit_range(group, unit);
    if (!range.numel) continue;
    Tensor grads = store_.group_grads(group).rows(range.begin, range.numel);  // fp32, this rank's sums
    const bool sliced = stage_ >= 1 && world_ > 1;
    const int64_t begin = sliced ? range.begin / world_ : range.begin;  // in the master partition
    const int64_t numel = sliced ? range.numel / world_ : range.numel;
    Tensor mine = reduction_->reduce_unit(grads, sliced ? flat_f32(fused_scratch_, numel) : Tensor());
    if (rounds_) backend_.round_to(mine, compute_dtype_);  // as the unfused path's 16-bit gradients
    // One read: the sum of squares, in double, is finite exactly when the gradient is.
    const Tensor views[] = {mine};
    const double squares = backend_.sum_squares_of(views);
    fused_squares_ += squares;
    bool finite = std::isfinite(squares);
    // Every rank must take the same branch (the refresh below is a collective): with slices, an
    // inf on one rank's slice is everyone's. Stage 0's all-reduced gradient is the same everywhere.
    if (sliced && fused_pass_ == FusedPass::Update) finite = comm_.all_reduce_max(finite ? 0.0 : 1.0) == 0.0;
    fused_overflow_ = fused_overflow_ || !finite;
    if (fused_pass_ == FusedPass::Update && finite) {  // a non-finite gradient leaves its unit as it was
      if (fused_step_.grad_divisor != 1.0f) backend_.scale(mine, 1.0f / fused_step_.grad_divisor);
      OptimizerPiece piece;
      piece.decay = group == ParamGroup::Decay;
      piece.param = s.master_rows(begin, numel);
      piece.grad = mine;
      for (size_t k = 0; k < s.state.size(); ++k) piece.state.push_back(s.state_rows(k, begin, numel));
      if (optimizer_->needs_tensor_slices()) add_tensor_slices(piece, group, {&range, 1}, sliced);
      optimizer_->update(backend_, piece, fused_step_);
      update_compute_partition(group, begin, numel);
      updated = true;
    }
    backend_.discard(grads);
  }
  units_[static_cast<size_t>(unit)].grads_live = false;
  if (updated) refresh_unit_params(unit);
}

// The compute parameters of a unit whose master range was just updated: stage 0 copies it, stages
// 1/2 all-gather the unit, stage 3 drops a stale gathered copy (a persistent unit is gathered again).
void ZeroEngine::refresh_unit_params(int unit) {
  if (stage_ == 3) {
    invalidate_secondary(unit);
    UnitState& u = units_[static_cast<size_t>(unit)];
    if (!u.gathered) return;
    finish_prefetch(unit);
    discard_unit_params(unit);
    u.gathered = false;
    if (store_.unit_numel(unit) < zero_.stage3_param_persistence_threshold) gather_unit(unit, false);
    return;
  }
  for (ParamGroup group : kTrainableGroups) {
    const UnitRange range = store_.unit_range(group, unit);
    if (!range.numel) continue;
    Tensor params = store_.group_params(group).rows(range.begin, range.numel);
    if (stage_ == 0) backend_.copy(params, state(group).master_rows(range.begin, range.numel));
    else all_gather_async(params, gather_source(group).rows(range.begin / world_, range.numel / world_))->wait();
  }
}

// ---- accounting ----------------------------------------------------------------------------------

ZeroEngine::BufferAddresses ZeroEngine::buffer_addresses() const {
  BufferAddresses addresses;
  for (const auto& s : groups_) {
    if (!s) continue;
    for (const Buffer* buffer : {&s->compute_partition, &s->host_compute, &s->host_compute_spare})
      if (buffer->data()) addresses.parameters.push_back(buffer->data());
    for (const Buffer* buffer : {&s->host_grad, &s->host_grad_spare, &s->resident_grad_copy})
      if (buffer->data()) addresses.gradients.push_back(buffer->data());
  }
  for (const UnitState& u : units_)  // hpZ's secondary partition
    for (const Buffer& share : u.secondary)
      if (share.data()) addresses.parameters.push_back(share.data());
  // The reduced gradients the strategy keeps (stages 1-3: its partition buffers).
  for (const void* buffer : reduction_->gradient_buffers()) addresses.gradients.push_back(buffer);
  for (const Buffer* wide : {&wide_grad_, &resident_wide_grad_})  // 16-bit ones widened for the update
    if (wide->data()) addresses.gradients.push_back(wide->data());
  return addresses;
}

ZeroMemory ZeroEngine::memory() const {
  ZeroMemory m;
  int64_t all_numel = 0, trainable_numel = 0, trainable_partition = 0;
  for (ParamGroup group : kAllGroups) {
    all_numel += store_.group(group).numel;
    if (group != ParamGroup::Frozen) {
      trainable_numel += store_.group(group).numel;
      trainable_partition += groups_[static_cast<size_t>(group)]->partition_numel;
    }
  }
  const int64_t f = sizeof(float);                               // master, optimizer state, gradients
  const int64_t p = static_cast<int64_t>(dtype_size(compute_dtype_));  // compute parameters
  const bool compute_copy = stage_ >= 1 && (offload_ || rounds_ || offload_param_);  // compute_partition beside the master
  if (stage_ < 3) {
    m.compute_params = (all_numel + (compute_copy ? trainable_partition : 0)) * p;
  } else {
    // Gathered at most: the persistent units plus the largest unit in use and one prefetched
    // (or what was measured, when more), within stage3_max_live_parameters.
    int64_t persistent = 0, largest = 0;
    for (int unit = 0; unit < store_.num_units(); ++unit) {
      const int64_t numel = store_.unit_numel(unit);
      if (numel < zero_.stage3_param_persistence_threshold) persistent += numel;
      int64_t in_use = 0;  // what acquiring the unit gathers: it and its ties' units
      for (int read : store_.unit_reads(unit))
        if (store_.unit_numel(read) >= zero_.stage3_param_persistence_threshold) in_use += store_.unit_numel(read);
      largest = std::max(largest, in_use);
    }
    const bool prefetched = stage3_prefetches(largest, largest, zero_.stage3_prefetch_bucket_size, zero_.stage3_max_live_parameters);
    const int64_t planned = persistent + (prefetched ? 2 * largest : largest);
    // The compute-dtype partitions: on the device, or in host memory with offload_param.
    const int64_t frozen_partition = groups_[static_cast<size_t>(ParamGroup::Frozen)]->partition_numel;
    const int64_t partitions = (frozen_partition + (compute_copy ? trainable_partition : 0)) * p;
    m.compute_params = std::max(peak_gathered_, planned) * p + (offload_param_ ? 0 : partitions);
    if (offload_param_) m.host_bytes += partitions;
    for (const UnitState& u : units_)  // hpZ's secondary partition: every non-persistent unit / R, on the device
      for (const Buffer& share : u.secondary) m.compute_params += static_cast<int64_t>(share.bytes());
  }
  if (fused_) {
    // One unit's gradients in flight, plus every tie's target unit, which the tying unit commits
    // early (a tied head: the embedding's gradient lives from the head's backward to its own),
    // plus one reduce-scatter slice.
    const auto trainable_numel_of = [&](int unit) {
      int64_t numel = 0;
      for (ParamGroup group : kTrainableGroups) numel += store_.unit_range(group, unit).numel;
      return numel;
    };
    int64_t largest = 0, tie_targets = 0;
    std::vector<bool> counted(static_cast<size_t>(store_.num_units()), false);
    for (int unit = 0; unit < store_.num_units(); ++unit) {
      largest = std::max(largest, trainable_numel_of(unit));
      for (int read : store_.unit_reads(unit))
        if (read != unit && !counted[static_cast<size_t>(read)]) {
          counted[static_cast<size_t>(read)] = true;
          tie_targets += trainable_numel_of(read);
        }
    }
    m.gradients = (largest + tie_targets) * f + static_cast<int64_t>(fused_scratch_.bytes());
  } else {
    m.gradients = reduction_->gradient_bytes();
    for (const auto& s : groups_) m.gradients += static_cast<int64_t>(s->resident_grad_copy.bytes());  // (DPU)
  }
  m.master_params = trainable_partition * f;
  m.optimizer_state = static_cast<int64_t>(optimizer_->state_names().size()) * trainable_partition * f;
  if (CompressedReduction* compressed = reduction_->compressed()) {  // exchanges, scratch, 0/1 Adam's replica
    if (compressed->in_host_memory()) m.host_bytes += compressed->bytes();
    else m.optimizer_state += compressed->bytes();
  }
  for (const std::vector<Buffer>& buffers : tensor_state_)  // per-tensor state, whole on every rank
    for (const Buffer& buffer : buffers) m.optimizer_state += static_cast<int64_t>(buffer.bytes());
  m.gradient_widening = static_cast<int64_t>(wide_grad_.bytes() + resident_wide_grad_.bytes());  // where the optimizer runs
  int64_t resident = 0;  // offload_optimizer.ratio < 1: elements whose master and state stay on the device
  for (ParamGroup group : kTrainableGroups) resident += groups_[static_cast<size_t>(group)]->resident_numel;
  m.resident_optimizer = resident * f * static_cast<int64_t>(1 + optimizer_->state_names().size());
  if (offload_)
    m.host_bytes += m.master_params + m.optimizer_state - m.resident_optimizer +
                    (trainable_partition - resident) * static_cast<int64_t>(grad_bytes()) +
                    static_cast<int64_t>(wide_grad_.bytes());
  for (const auto& s : groups_) {  // DPU's twins of the host gradient copy and staging copy
    for (const Buffer* spare : {&s->host_grad_spare, &s->host_compute_spare})
      m.host_bytes += static_cast<int64_t>(spare->bytes());
    if (offload_param_) m.host_bytes += static_cast<int64_t>(s->host_compute.bytes());  // the partition's twin
  }
  m.staging = reduction_->staging_bytes();
  return m;
}

ZeroCommPlan ZeroEngine::comm_plan(int64_t accumulation) const {
  const double share = static_cast<double>(world_ - 1) / static_cast<double>(world_);
  // Gradients are reduced in their dtype (fp32, or 16-bit); parameters are gathered in the compute dtype.
  const double param_size = static_cast<double>(dtype_size(compute_dtype_));
  double trainable_numel = 0.0;
  for (ParamGroup group : kTrainableGroups) trainable_numel += static_cast<double>(store_.group(group).numel);
  const double grad_bytes = static_cast<double>(this->grad_bytes()) * trainable_numel;
  const double param_bytes = param_size * trainable_numel;
  ZeroCommPlan plan;
  const double micro = static_cast<double>(accumulation);
  switch (stage_) {
    case 0: plan.all_reduce = 2.0 * share * grad_bytes; break;
    case 1:
      plan.reduce_scatter = share * grad_bytes;
      plan.all_gather = share * param_bytes;
      break;
    case 2:
      plan.reduce_scatter = micro * share * grad_bytes;
      plan.all_gather = share * param_bytes;
      break;
    default: stage3_comm_plan(plan, micro, grad_bytes);
  }
  return plan;
}

std::vector<std::vector<UnitRange>> ZeroEngine::reduce_buckets(ParamGroup group) const {
  std::vector<std::vector<UnitRange>> buckets;
  std::vector<UnitRange> bucket;
  int64_t pending = 0;
  auto emit = [&] {
    std::sort(bucket.begin(), bucket.end(), [](const UnitRange& a, const UnitRange& b) { return a.begin < b.begin; });
    if (!bucket.empty()) buckets.push_back(std::move(bucket));
    bucket.clear();
    pending = 0;
  };
  for (int unit = store_.num_units() - 1; unit >= 0; --unit) {
    if (const UnitRange range = store_.unit_range(group, unit); range.numel) bucket.push_back(range);
    for (ParamGroup other : kTrainableGroups) pending += store_.unit_range(other, unit).numel;
    if (pending >= zero_.reduce_bucket_size) emit();
  }
  emit();
  return buckets;
}

// Stage 3 (ZeroCommPlan): each non-persistent unit is gathered for every use (every user's forward,
// and its backward when that reads parameters: an embedding's does not) in every micro-batch;
// persistent units once after each update. ZeRO++ changes the bytes as docs/zero-plus-plus.md says.
void ZeroEngine::stage3_comm_plan(ZeroCommPlan& plan, double micro, double grad_bytes) const {
  const double share = static_cast<double>(world_ - 1) / static_cast<double>(world_);
  const double param_size = static_cast<double>(dtype_size(compute_dtype_));
  const bool several = world_ > 1;
  // One gather of a range of n elements over `ranks` ranks (all, or hpZ's node): `ranks` slices of
  // n / ranks, each in the compute dtype or (qwZ) as int8 codes and a scale per block of the slice.
  auto gather_bytes = [&](int64_t n, int ranks) {
    const double part = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
    if (!zero_.zero_quantized_weights || ranks == 1) return part * static_cast<double>(n) * param_size;
    return part * static_cast<double>(ranks) * static_cast<double>(quantized_wire_bytes(n / ranks, 8, kQuantizedWeightBlock));
  };
  auto world_gather = [&](int64_t n) { return gather_bytes(n, world_); };
  const int per_node = nodes_ ? nodes_->ranks_per_node : 1;
  for (int unit = 0; unit < store_.num_units(); ++unit) {
    int64_t uses = 0;  // gathers per micro-batch
    for (int user = 0; user < store_.num_units(); ++user) {
      const std::vector<int>& reads = store_.unit_reads(user);
      if (std::find(reads.begin(), reads.end(), unit) != reads.end())
        uses += store_.unit_backward_reads_params(user) ? 2 : 1;
    }
    for (ParamGroup group : kAllGroups) {
      const int64_t n = store_.unit_range(group, unit).numel;
      if (!n) continue;
      if (store_.unit_numel(unit) < zero_.stage3_param_persistence_threshold) {
        plan.all_gather += world_gather(n);  // persistent: once per update
      } else if (!units_[static_cast<size_t>(unit)].secondary.empty()) {
        // hpZ: the first gather of the step over all ranks, the others within the node.
        plan.all_gather += world_gather(n);
        plan.node_all_gather += (micro * static_cast<double>(uses) - 1.0) * gather_bytes(n, per_node);
      } else {
        plan.all_gather += micro * static_cast<double>(uses) * world_gather(n);
      }
    }
  }
  if (!zero_.zero_quantized_gradients || !several) {
    plan.reduce_scatter = micro * share * grad_bytes;
    return;
  }
  // qgZ: per bucket of a group's units (W S elements), hop 1 sends each of the node's R - 1 other
  // ranks N slices of S values, hop 2 each of the N - 1 other nodes one; int4 + scales per slice.
  const int nodes = nodes_->nodes;
  for (ParamGroup group : kTrainableGroups) {
    if (!store_.group(group).numel) continue;
    for (const std::vector<UnitRange>& bucket : reduce_buckets(group)) {
      const int64_t slice = slice_numel(bucket, world_);
      plan.node_all_to_all += micro * (per_node - 1) * nodes *
                              static_cast<double>(quantized_wire_bytes(slice, 4, kQuantizedGradientBlock));
      plan.cross_all_to_all += micro * (nodes - 1) *
                               static_cast<double>(quantized_wire_bytes(slice, 4, kQuantizedGradientBlock));
    }
  }
}

}  // namespace zt
