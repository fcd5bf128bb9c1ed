// ZeroEngine: ZeRO stages 0-3 and ZeRO-Offload over a ParamStore and a Communicator.
//
//   stage 0: every rank holds everything; gradients all-reduced in buckets at the boundary.
//   stage 1: fp32 master weights and optimizer state partitioned (1/W each); gradients
//            reduce-scattered at the accumulation boundary; updated partitions all-gathered.
//   stage 2: as 1, but each unit's gradients are reduce-scattered (in buckets of
//            reduce_bucket_size elements) as soon as backward completes them, and only this
//            rank's partition is kept and accumulated.
//   stage 3: as 2, and the parameters themselves are partitioned: a unit is all-gathered just
//            before the model uses it (the next one prefetched) and released after use unless
//            persistent (stage3_param_persistence_threshold) or soon reused
//            (stage3_max_reuse_distance), within stage3_max_live_parameters.
//   offload_optimizer cpu: master + optimizer state (and a copy of the gradient partition) live
//            in host memory and are updated there by the optimizer on the host backend (the CPU
//            Adam for AdamW); the updated partition is copied back to the compute device.
//
// The optimizer (optim/optimizer.h) is a seam: the engine holds its named state buffers beside
// the master partition and calls its update over contiguous pieces of the partition.
//   fused optimizer (LOMO, AdaLomo): no gradient buffer is resident at any stage; each unit's gradient
//            is committed when its backward starts, reduced when backward completes it
//            (all-reduce at stage 0, reduce-scatter into a one-unit scratch slice from stage 1),
//            then measured (a norm pass) or applied to this rank's master slice and the compute
//            parameters (an update pass), and given back. One micro-batch per step.
// The gradient reduction is a strategy beside it (gradient_reduction.h), chosen once from the stage,
// the world size and the optimizer: all-reduce (stage 0), reduce-scatter (1-3), one rank, and the
// compressed strategy (1-bit Adam, 0/1 Adam: each rank keeps its whole local gradient and the
// ranks average the optimizer's momentum, or take local steps, compressed to signs; stages 0-2).
//   offload_param cpu (stage 3): the compute-dtype parameter partitions (frozen LoRA base
//            weights included) live in host memory; a unit's slice is copied to the device
//            when the unit is gathered, so the device holds only the gathered units.
//
// Partition r of a group is the concatenation of every unit's slice r (param_store.h), so all
// collectives run over contiguous ranges. Gradients are summed over ranks, not averaged: the
// trainer already scales the loss by 1 / (target tokens of the global batch).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "comm/communicator.h"
#include "comm/node_groups.h"
#include "model/causal_lm.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "zero/gradient_reduction.h"
#include "zero/zero_config.h"

namespace zt {

class HostWorker;

// Bytes held per rank, by what they are and where (rank 0 prints this at start).
struct ZeroMemory {
  int64_t compute_params = 0;      // device: compute-dtype parameters resident (stage 3: partitions +
                                   // persistent units + the largest unit, twice when it is prefetched:
                                   // stage3_prefetches, zero_config.h)
  int64_t gradients = 0;           // device: gradient buffers (full for 0/1 and for one rank; partition + one
                                   // bucket for 2/3; a fused optimizer: the units in flight + one slice)
  int64_t master_params = 0;       // fp32 master partition (host when offloaded)
  int64_t optimizer_state = 0;     // the optimizer's state buffers (host when offloaded)
  int64_t host_bytes = 0;          // host memory: offloaded master, optimizer state and gradient copy
                                   // (part of the above), and offload_param's parameter partitions
  int64_t resident_optimizer = 0;  // offload_optimizer.ratio < 1: the master + optimizer state bytes kept
                                   // on the device (part of the two above, not of host_bytes)
  int64_t staging = 0;             // bucket staging buffers
  int64_t gradient_widening = 0;   // 16-bit gradients: the fp32 copy of one update piece (a unit's slice) the
                                   // optimizer reads (device; host memory with offload, part of host_bytes)
};

// Bytes each rank sends per optimizer step by collective, from the ZeRO formulas for this
// layout (ring algorithm: see communicator.h); the tests compare it with the counters.
// ZeRO++ (docs/zero-plus-plus.md) adds the collectives of its node groups: hpZ's gathers within a
// node (node_all_gather), qgZ's intra-node and inter-node all-to-alls; qwZ and qgZ count the bytes
// of their int8/int4 codes and fp32 scales. Collectives over all ranks cross nodes (on more than one).
struct ZeroCommPlan {
  double all_reduce = 0, reduce_scatter = 0, all_gather = 0;  // over all ranks
  double node_all_gather = 0, node_all_to_all = 0;            // over a node's ranks
  double cross_all_to_all = 0;                                // over the ranks with one place on every node
  double total() const { return all_reduce + reduce_scatter + all_gather + intra_node(); }
  double intra_node() const { return node_all_gather + node_all_to_all; }
  double inter_node() const { return all_reduce + reduce_scatter + all_gather + cross_all_to_all; }
};

// data_types.grad_accum_dtype (the store's gradient dtype) against the rest of the run; throws
// naming the key. fp32 always works. bf16/fp16 gradients (half the gradient bytes, held and
// reduced) need that compute dtype (a backward GEMM writes its inputs' dtype or fp32) and an
// optimizer that reads a gradient buffer after backward: not LOMO/AdaLomo (fused into backward,
// no buffer to halve), not 1-bit/0-1 Adam (their compressed steps keep fp32 local gradients).
// Offload works: the host copy is 16-bit and widened on the host for the update.
void check_gradient_dtype(DType grad_dtype, DType compute_dtype, const Optimizer& optimizer);
std::string gradient_dtype_refusal(DType grad_dtype, DType compute_dtype, const Optimizer& optimizer);  // "": fine

// What of the store holds memory from the start under `zero` on `world` ranks: stage 3 gathers
// parameters unit by unit (so they are loaded unit by unit too), stages 2/3 on several ranks keep
// only the gradients in flight. The trainer builds the store with it and then calls
// ParamStore::commit_unit_params, loads the unit and init_unit_from_store, unit after unit.
StoreResidency zero_store_residency(const ZeroConfig& zero, int world, const Optimizer& optimizer);

class ZeroEngine final : public UnitHooks {
 public:
  // compute_dtype (the store's param dtype): the compute parameters are the fp32 master rounded
  // to it, gathered in it; for bf16/fp16 the reduced fp32 gradients are rounded to it as well
  // (fp16 overflow shows up as inf, as with DeepSpeed's 16-bit gradients; DESIGN.md "Numerics").
  // The store's grad dtype may be that 16-bit dtype (check_gradient_dtype): then gradients are
  // accumulated, reduced and kept in 16 bits, and widened to fp32 piece by piece for the update.
  // host_comm: MPI over host buffers, for a momentum exchange the optimizer puts on MPI
  // (comm_backend_name "mpi") while `comm` is the device's; not needed on the CPU backend.
  ZeroEngine(Backend& backend, Communicator& comm, ParamStore& store, const ZeroConfig& zero,
             const OptimizerConfig& optimizer, DType compute_dtype = DType::F32, Communicator* host_comm = nullptr);
  ~ZeroEngine() override;

  int stage() const { return stage_; }
  Backend& backend() { return backend_; }
  bool offload() const { return offload_; }

  // Once the store holds the initial weights (identical on every rank): builds this rank's
  // master partition and, for stage 3, partitions the parameters and frees the rest.
  // init_from_store() does it for every unit; a store loaded unit by unit calls
  // init_unit_from_store(u) after loading unit u (0, 1, ... in order), then finish_init().
  void init_from_store();
  void init_unit_from_store(int unit);
  void finish_init();

  // Step protocol: begin_step (with the number the step's update will have if it is not
  // skipped: 1 for the first), then per micro-batch begin_micro_batch + forward/backward +
  // end_micro_batch, then reduce_gradients, gradient_norm, apply_update.
  void begin_step(int64_t update_number = 1);
  // Before each micro-batch's forward: `last` marks the step's last one, whose backward
  // reduces stage 0/1 gradients bucket by bucket as units complete (without the call they are
  // reduced at reduce_gradients, after the backward).
  void begin_micro_batch(bool last);
  void end_micro_batch();      // stage 2/3: flush the last gradient bucket
  // Completes the gradient reduction (stage 0: all-reduce; stage 1: reduce-scatter; both done
  // during the last backward when begin_micro_batch marked it), then the dtype rounding.
  void reduce_gradients();
  double gradient_norm();      // global L2 norm of the (reduced, still loss-scaled) gradients
  bool gradients_overflow();   // any inf/NaN in any rank's gradients (the fp16 overflow check)
  // Both with one device read and one collective (the step's one host wait for the gradients):
  // the norm's sum of squares is accumulated in double, where squares of finite fp32 values
  // cannot overflow, so an inf or NaN anywhere is exactly a non-finite norm.
  struct GradientCheck {
    double norm = 0.0;     // as gradient_norm(); not finite when `overflow`
    bool overflow = false;  // as gradients_overflow()
  };
  GradientCheck check_gradients();
  // Divides the gradients by step.grad_divisor (loss scale x clip coefficient), runs the
  // optimizer on this rank's partitions and makes the compute parameters current (all-gather for
  // stages 1/2, invalidation for 3).
  // With --delayed-param-update N (ZeroConfig::delayed_update_after, docs/zero-offload.md), from
  // update N + 1 on: the gradients go to the host and the optimizer runs on them in a background
  // thread, while the next step's forward and backward run on the parameters before this update
  // (ZeRO-Offload's one-step delayed parameter update); the next apply_update (or
  // finish_delayed_update) waits for it and makes its parameters current.
  void apply_update(const OptimizerStep& step);
  // Completes the host update in flight, if any (DPU's, or this step's per-bucket one), and makes
  // the compute parameters current. A checkpoint is saved after it (so a resumed run starts where
  // the saving run continues), a skipped step calls it, and gather_full_params. Else: nothing.
  void finish_delayed_update();
  // --update-per-bucket (ZeroConfig::update_per_bucket, docs/zero-offload.md): whether it is on, and,
  // before the step's backward, the step's update (its scalars known then: no clipping, no fp16)
  // that the CPU optimizer applies to each bucket as the last backward reduces it; apply_update
  // then only waits for it. A piece whose gradient is not finite is left unchanged.
  bool updates_per_bucket() const { return zero_.update_per_bucket; }
  void arm_bucket_update(const OptimizerStep& step);
  const Optimizer& optimizer() const { return *optimizer_; }

  // A fused optimizer's backward passes (between begin_step and reduce_gradients): a norm pass
  // reduces and measures each unit's gradient (gradient_norm, gradients_overflow read the result);
  // an update pass does that and applies `step` to the unit, so the step's scalars must be known.
  void begin_norm_pass();
  void begin_update_pass(const OptimizerStep& step);

  // Makes every parameter of the store current and resident (stage 3: gathers all units),
  // e.g. before writing the final weights.
  void gather_full_params();

  // UnitHooks (called by the model).
  void acquire(int unit, UnitUse use) override;
  void release(int unit) override;
  void gradients_ready(int unit) override;

  // Checkpoint access: this rank's optimizer partitions (host or device views) per trainable
  // group with elements, and how many distinct partitions the job holds (stage 0: one, the
  // same on every rank; else W). After loading them, refresh_params_from_master makes the
  // compute parameters current again.
  // The partition [P] is in one part, or two with offload_optimizer.ratio < 1 (the first K
  // elements on the device, the rest [K, P) on the host), in order.
  struct PartitionViews {
    struct Part {
      int64_t begin = 0;           // its first element in the partition
      Tensor master;               // fp32 [n]
      std::vector<Tensor> state;   // fp32 [n] each, named optimizer().state_names()
    };
    ParamGroup group;
    std::vector<Part> parts;
    int64_t numel() const { return parts.empty() ? 0 : parts.back().begin + parts.back().master.numel(); }
  };
  std::vector<PartitionViews> partition_views();
  // The optimizer's per-tensor state (Optimizer::tensor_state): whole and identical on every
  // rank, one entry per trainable parameter that has any, in the store's order.
  struct TensorStateViews {
    std::string parameter;            // its name
    std::vector<std::string> names;   // the state's names
    std::vector<Tensor> state;        // fp32, one per name
  };
  std::vector<TensorStateViews> tensor_state_views();
  int partition_count() const { return stage_ == 0 ? 1 : world_; }
  // The compressed strategy's buffers on this rank (its own, whatever the stage), per trainable
  // group by name: a momentum exchange's error feedback ("worker_error" fp32 [W*C],
  // "server_error" [C]) and 0/1 Adam's replica ("replica_param", "replica_exp_avg", ...,
  // fp32 [N] rank-major); empty when the optimizer exchanges nothing or there is nothing to keep.
  // The scalars go with them; after loading both, exchange_loaded() (the compute parameters are
  // the replica's while local steps run).
  struct ExchangeViews {
    ParamGroup group;
    std::vector<std::string> names;
    std::vector<Tensor> buffers;
  };
  std::vector<ExchangeViews> exchange_views();
  struct ExchangeScalars {
    bool replica = false;  // local steps began: the replica is this rank's model
    double lr_sum = 0.0;   // lr summed over the local steps since the ranks last synchronised
  };
  ExchangeScalars exchange_scalars() const;
  void exchange_loaded(const ExchangeScalars& scalars);
  int partition_index() const { return stage_ == 0 ? 0 : rank_; }
  void refresh_params_from_master();

  ZeroMemory memory() const;
  // Where this rank's own buffers are, by what they hold (the memory model names its counted
  // bytes with them): the compute-dtype parameter partitions (device, or host with offload) and
  // the reduced gradient partitions (device, and their host copy with offload), and 16-bit
  // gradients' fp32 copy for the update.
  struct BufferAddresses {
    std::vector<const void*> parameters, gradients;
  };
  BufferAddresses buffer_addresses() const;
  // Expected bytes sent per step for `accumulation` micro-batches (stage 3: with every
  // non-persistent unit gathered twice per micro-batch, i.e. stage3_max_reuse_distance 0).
  ZeroCommPlan comm_plan(int64_t accumulation) const;
  // ZeRO++'s node groups (hpZ, qgZ on several ranks), whose communicators count their own
  // traffic; nullptr without them.
  const NodeGroups* node_groups() const { return nodes_.get(); }

 private:
  struct GroupState;
  struct UnitState {
    bool gathered = true;    // stage 3: the unit's parameters are resident and current
    bool grads_live = true;  // stage 2/3: the unit's gradient range holds this micro-batch's sums
    UnitUse last_use = UnitUse::Forward;
    std::vector<Pending> inflight;  // stage 3: all-gathers started ahead of use (a prefetch)
    std::vector<Buffer> uploads;    // offload_param with qwZ: this rank's slices copied to the device for them
    // Several ranks with offload_param: some gather of `inflight` uploads its slice from the host
    // partition itself (Communicator::all_gather_from_host_async), reading it until it completes.
    bool gathers_read_host = false;
    // One rank with offload_param: the gathers, host -> device copies on the transfer queue beside
    // the compute (finish_prefetch orders the compute after them; the host waits for none).
    std::vector<std::unique_ptr<BackendEvent>> host_uploads;
    // A host update's rounded parameters of the unit uploaded into the compute partition on the
    // transfer queue (upload_rounded_partitions); its gather orders the compute after it.
    std::shared_ptr<BackendEvent> partition_upload;
    // hpZ: per group (kAllGroups order), compute dtype [range / R]: this rank's place in its node
    // of the unit's parameters, kept from the first gather after an update, so that later gathers
    // run within the node. Empty for persistent units.
    std::vector<Buffer> secondary;
    bool secondary_current = false;  // holds the parameters of the last update
    bool capture_secondary = false;  // the gather in flight is over all ranks: keep its share when done
  };

  GroupState& state(ParamGroup group);
  Pending all_gather_async(Tensor out, Tensor in);  // comm_'s, or a copy on one rank
  Tensor gather_source(ParamGroup group) const;  // what stage 1-3 all-gather from (compute partition)
  size_t param_bytes(const GroupState& s) const;  // a compute-dtype partition's bytes
  Tensor compute_partition_view(const GroupState& s) const;  // compute dtype [P]
  void gather_unit(int unit, bool async);
  Pending gather_range(UnitState& u, int group_index, Tensor out, Tensor in);  // one group's range of a unit
  void capture_secondary(int unit);  // hpZ: the node share of a unit just gathered over all ranks
  void check_zeropp() const;
  void stage3_comm_plan(ZeroCommPlan& plan, double micro, double grad_bytes) const;
  // The buckets a micro-batch's gradients of `group` are reduced in (BucketedReduction's queue:
  // units as backward completes them, last first, cut at reduce_bucket_size over the groups).
  std::vector<std::vector<UnitRange>> reduce_buckets(ParamGroup group) const;
  void open_node_groups();
  void make_secondary_partition();
  void invalidate_secondary(int unit);
  void finish_prefetch(int unit);
  Tensor device_master_rows(ParamGroup group, int64_t begin, int64_t numel);  // offload_param: what gathers round on the device
  // Stage 3's gathers of the unit (gather_range): within the node from hpZ's current secondary
  // partition; or over all ranks exactly (no qwZ), the input this rank's slice of the output.
  bool gathers_from_secondary(const UnitState& u) const;
  bool gathers_in_place(const UnitState& u) const;
  void gather_offloaded_range(UnitState& u, ParamGroup group, UnitRange range, Tensor out, Tensor in);
  void settle_host_uploads();  // before the host rewrites a partition a gather may still be reading
  void prefetch_next(int unit, UnitUse use);
  void discard_unit_params(int unit);
  bool keep_after_release(int unit) const;
  void sync_params_after_update();
  size_t grad_bytes() const;                        // one gradient element's (the store's grad dtype)
  Tensor host_grad_rows(const GroupState& s, int64_t begin, int64_t numel) const;  // grad dtype [numel]: offload's host gradient copy
  // The update's pieces of a group (consecutive units): the buckets whose parameters are gathered
  // together, the pieces the optimizer takes at once within one, and this rank's elements of one.
  std::vector<std::vector<UnitRange>> gather_pieces(ParamGroup group) const;
  std::vector<std::vector<UnitRange>> update_pieces(const std::vector<UnitRange>& bucket) const;
  int64_t piece_numel(const std::vector<UnitRange>& units) const;
  void update_piece(ParamGroup group, const std::vector<UnitRange>& units, const OptimizerStep& step, float grad_divisor);
  // update_piece's parts: the piece's gradient where the optimizer state is (grad dtype [numel];
  // with offload copied to the host), then the optimizer on it (state backend only: with offload
  // this touches host memory alone, so the delayed update runs it on its own thread).
  Tensor piece_gradient(ParamGroup group, int64_t begin, int64_t numel, bool queued = false);  // queued: copy_async
  void optimize_piece(ParamGroup group, const std::vector<UnitRange>& units, Tensor grad, const OptimizerStep& step,
                      float grad_divisor, Tensor rounded);
  Tensor rounding_target(ParamGroup group, int64_t begin, int64_t numel, bool compute_too);
  int64_t piece_begin(const std::vector<UnitRange>& units) const;  // the piece's first element in the partition
  // DPU (apply_update): whether this update is delayed; starting it; the refusals of the constructor.
  bool delays(const OptimizerStep& step) const;
  void start_delayed_update(const OptimizerStep& step, float grad_divisor);
  void check_delayed_update() const;
  void allocate_update_scratch(Backend& state_backend);  // wide_grad_, fused_scratch_ (the constructor's)
  // offload_optimizer.ratio < 1: which first units of a group stay on the device; the optimizer
  // state buffers of both parts; the refusals.
  void place_resident_part(GroupState& s, const std::vector<UnitRange>& units, int64_t divisor) const;
  void allocate_optimizer_state(GroupState& s, Backend& state_backend);
  void check_partial_offload() const;
  bool partial_offload() const;  // some group keeps a part on the device
  Backend& piece_backend(ParamGroup group, int64_t begin);  // where the piece's optimizer state is
  void swap_delayed_buffers();     // DPU: the host buffers' twins (GroupState::host_grad_spare, ...)
  std::shared_ptr<BackendEvent> upload_rounded_partitions();  // host_compute -> compute partitions, unit by unit
  // Before the device reads the compute partitions: the compute ordered after the uploads
  // upload_rounded_partitions started (all units, or one: its gather).
  void order_after_partition_uploads();
  void order_after_partition_upload(int unit);
  // The host update on worker_ (offload_overlap.cpp): a piece of it, posting pieces, and the
  // per-bucket update's refusals, posting of copied buckets and completion.
  struct HostPiece {
    ParamGroup group = ParamGroup::Decay;
    std::vector<UnitRange> units;
    Tensor grad;     // grad dtype [numel], host
    Tensor rounded;  // empty or compute dtype [numel], host: rounding_target's
  };
  void post_host_pieces(std::vector<HostPiece> pieces, const OptimizerStep& step, float grad_divisor,
                        bool skip_non_finite);
  void check_bucket_update() const;
  void post_copied_buckets();
  void finish_bucket_update(const OptimizerStep& step);
  // fp32 [n] the optimizer reads: `grad` itself, or a 16-bit one widened into wide_grad_ on `on`.
  Tensor fp32_gradient(Backend& on, Tensor grad);
  // offload_optimizer.ratio < 1: the optimizer over the device-resident parts, from the reduced
  // gradients or (DPU) from their copy.
  void update_resident_parts(const OptimizerStep& step, float grad_divisor, bool from_copy = false);
  void update_compute_partitions();  // compute_partition = master (rounded to the compute dtype)
  void update_compute_partition(ParamGroup group, int64_t begin, int64_t numel);
  struct BucketGather {
    ParamGroup group = ParamGroup::Decay;
    std::vector<UnitRange> units;
    Buffer staging;  // compute dtype [W * S] when the bucket has several units
    Pending pending;
  };
  BucketGather start_bucket_gather(ParamGroup group, const std::vector<UnitRange>& bucket);
  void finish_bucket_gather(BucketGather& gather);
  void start_bounded_gather(std::deque<BucketGather>& gathers, ParamGroup group, const std::vector<UnitRange>& bucket);
  // A bucket's final reduced slices (the reduction strategy's slices_final): with offload, their
  // copy to the host starts now on the transfer queue, overlapping the rest of backward.
  void slices_final(ParamGroup group, int64_t begin, Tensor slices);
  // The compute queue ordered after the gradient downloads slices_final started (end of backward).
  void order_after_grad_downloads();
  // For optimizers that need_tensor_slices: the piece's tensors (`units` of `group`, this rank's
  // slices when `sliced`, else whole), their per-tensor state and the sums over the ranks.
  void add_tensor_slices(OptimizerPiece& piece, ParamGroup group, std::span<const UnitRange> units, bool sliced);
  void fused_unit_ready(int unit);  // a fused optimizer's work on a unit whose gradient is complete
  void refresh_unit_params(int unit);  // after a fused update: the unit's compute parameters

  Backend& backend_;
  Communicator& comm_;
  ParamStore& store_;
  ZeroConfig zero_;
  std::unique_ptr<Optimizer> optimizer_;
  int stage_ = 0;
  int world_ = 1;
  int rank_ = 0;
  bool offload_ = false;        // offload_optimizer cpu
  bool offload_param_ = false;  // offload_param cpu (stage 3): compute partitions in host memory
  bool fused_ = false;          // the optimizer updates inside backward (LOMO)
  bool grads_in_flight_ = false;  // no resident gradient buffer: units' ranges committed as backward writes them
  std::unique_ptr<NodeGroups> nodes_;  // ZeRO++'s node groups (hpZ, qgZ); declared before the strategy using them
  bool hpz_ = false;                   // a secondary partition within each node
  bool exact_gathers_ = false;         // gather_full_params: neither qwZ nor hpZ
  std::unique_ptr<GradientReduction> reduction_;  // the gradient-reduction strategy (gradient_reduction.h)
  enum class FusedPass { None, Norm, Update };
  FusedPass fused_pass_ = FusedPass::None;
  OptimizerStep fused_step_;
  double fused_squares_ = 0.0;    // this rank's sum of squares of the reduced gradients of the pass
  bool fused_overflow_ = false;   // an inf/NaN among them
  Buffer fused_scratch_;          // fp32 [largest unit slice]: a unit's reduce-scatter output
  DType compute_dtype_ = DType::F32;
  bool rounds_ = false;  // compute dtype bf16/fp16
  std::unique_ptr<Backend> host_;        // offload_optimizer: the host memory and the host update
  std::unique_ptr<Backend> param_host_;  // offload_param: host memory of the parameter partitions
  Buffer wide_grad_;  // fp32 [largest update piece], 16-bit gradients only: a piece widened for the
                      // optimizer (host memory with offload: declared after host_, released before it)
  Buffer resident_wide_grad_;  // the same on the device for offload_optimizer.ratio's resident pieces
                               // (where the device's optimizer does not fuse the widening)
  std::vector<std::unique_ptr<GroupState>> groups_;  // [kParamGroups]
  std::vector<std::vector<Buffer>> tensor_state_;    // [store entries]: each trainable tensor's per-tensor
                                                     // state, fp32, Optimizer::tensor_state(shape) order
  std::vector<UnitState> units_;
  bool boundary_ = false;                            // the step's last micro-batch is running
  bool gradients_finished_ = false;                  // this step's partitions were rounded/offloaded per bucket
  std::unique_ptr<BackendEvent> grads_downloaded_;   // offload: the last slices_final download (transfer queue)
  std::unique_ptr<BackendEvent> host_grads_ready_;   // offload: after the last gradient download
  std::shared_ptr<BackendEvent> uploads_done_;       // offload: after the last parameter upload
  std::shared_ptr<BackendEvent> spare_uploads_done_; // DPU: after the last upload from host_compute_spare
  int64_t live_gathered_ = 0, peak_gathered_ = 0;    // stage 3: gathered elements now / at most
  // DPU, the per-bucket update (offload_overlap.cpp):
  bool host_update_in_flight_ = false;               // posted to worker_, not made current yet
  struct DelayedStep {                               // DPU with a device-resident part: its update,
    OptimizerStep step;                              // run when the host's is made current
    float grad_divisor = 1.0f;
  };
  std::optional<DelayedStep> delayed_resident_;
  std::optional<OptimizerStep> bucket_step_;         // the per-bucket update armed for this step
  struct CopiedBucket {                              // slices copied to the host, not posted yet
    ParamGroup group = ParamGroup::Decay;
    int64_t begin = 0, numel = 0;                    // in the group's partition
  };
  std::vector<CopiedBucket> copied_buckets_;
  // The host optimizer's thread (host_worker.h); declared last, so that it ends (running what was
  // posted) before the buffers it touches go away (the destructor ends it first anyway).
  std::unique_ptr<HostWorker> worker_;
};

}  // namespace zt
