// The gradient-reduction strategy: how a step's gradients become the reduced gradients each rank
// updates from, beside the optimizer (optim/optimizer.h). The engine calls it at the step's
// points (begin_step, begin_micro_batch, unit_ready as backward completes a unit, end_micro_batch,
// finish, then reduced() for the update) and has no stage or optimizer branches for reduction;
// make_gradient_reduction chooses it, in one place, from the ZeRO stage, the world size and the
// optimizer:
//   all-reduce (allreduce_reduction.cpp, stage 0): buckets of whole units all-reduced in place;
//     every rank holds all the sums.
//   reduce-scatter (reduce_scatter_reduction.cpp, stages 1-3): buckets reduce-scattered; each
//     rank keeps its partition's sums (stages 2/3: every micro-batch, and the full-size gradients
//     given back as soon as reduced).
//   quantized (quantized_reduction.cpp, ZeRO++'s qgZ at stage 3): the reduce-scatter strategy with
//     each bucket reduced by two all-to-alls of int4 blocks, within the node then across nodes.
//   one rank (one_rank_reduction.cpp): nothing to reduce.
//   compressed (compressed_reduction.cpp: 1-bit Adam, 0/1 Adam): in the steps where the optimizer
//     exchanges its momentum or takes local steps, each rank keeps its local gradient and the
//     ranks average a compressed vector instead; in the others it reduces as the stage's strategy.
// Optimizers fused into backward (LOMO) reduce unit by unit through reduce_unit().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "comm/communicator.h"
#include "comm/node_groups.h"
#include "model/param_store.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "zero/zero_config.h"

namespace zt {

class CompressedReduction;

// What a strategy works with: the engine's.
struct ReductionContext {
  Backend* backend = nullptr;
  Communicator* comm = nullptr;
  ParamStore* store = nullptr;
  ZeroConfig zero;
  int stage = 0, world = 1, rank = 0;
  NodeGroups* nodes = nullptr;       // ZeRO++'s node groups, when it has them (qgZ's two hops)
  DType compute_dtype = DType::F32;  // fp32 reduced gradients are rounded to it (fp16 overflow becomes inf);
                                     // 16-bit ones (store->grad_dtype()) are in it already
  // In the step's last micro-batch: this rank's final reduced slices [begin, begin + n) of a
  // group's partition, rounded, as their bucket completes (the engine starts their offload copy).
  std::function<void(ParamGroup group, int64_t begin, Tensor slices)> slices_final;
  // A unit's full-size gradients were reduced and their memory given back.
  std::function<void(int unit)> released;
};

// The engine's buffers of a trainable group, for a strategy that updates itself (local steps).
struct GroupPartitions {
  ParamGroup group = ParamGroup::Decay;
  Tensor master;               // fp32 [P]
  std::vector<Tensor> state;   // fp32 [P] each, Optimizer::state_names()
  Tensor params;               // compute dtype [N]: the store's parameters
};

// What the update takes, once a strategy prepared it.
enum class UpdateSource {
  Reduced,    // reduced(): the reduced gradients, to be divided by the step's grad_divisor
  Exchanged,  // reduced(): an average the strategy put there, already divided
  Done,       // the strategy updated the partitions and the compute parameters itself
};

class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  virtual void begin_step(int64_t update_number) = 0;  // the update's number if the step is not skipped
  virtual void begin_micro_batch(bool last) { last_ = last; }
  // Backward completed the unit's gradients in this micro-batch.
  virtual void unit_ready(int unit) = 0;
  virtual void end_micro_batch() {}
  // Completes the step's reduction, and rounds to the compute dtype what is not rounded yet.
  // Returns whether every slice was finished (slices_final) as its bucket completed.
  virtual bool finish() = 0;
  // The reduced gradients of `group` this rank updates from: fp32 [N] or its partition [P].
  virtual Tensor reduced(ParamGroup group) = 0;
  virtual double gradient_norm() = 0;  // global L2 norm (still loss-scaled), the same on every rank
  virtual bool overflow() = 0;         // an inf/NaN in any rank's gradients
  // Before the update (see UpdateSource).
  virtual UpdateSource prepare_update(const OptimizerStep& step, std::span<const GroupPartitions> groups) {
    (void)step, (void)groups;
    return UpdateSource::Reduced;
  }
  // A fused optimizer's unit: this rank's share of its reduced gradient range `grads` (the range
  // itself, or `scratch` [range / W]).
  virtual Tensor reduce_unit(Tensor grads, Tensor scratch) = 0;
  // Stages 2/3: each micro-batch's unit gradients are reduced as they complete, so no full-size
  // gradient buffer stays resident.
  virtual bool reduces_per_micro_batch() const { return false; }
  virtual int64_t gradient_bytes() const = 0;   // gradient buffers held, the store's included
  // The strategy's own reduced-gradient buffers (not the store's), for the memory model's terms.
  virtual std::vector<const void*> gradient_buffers() const { return {}; }
  virtual int64_t staging_bytes() const { return 0; }  // the most bucket staging held at once
  virtual CompressedReduction* compressed() { return nullptr; }  // checkpoints and accounting

 protected:
  bool last_ = false;  // the step's last micro-batch is running
};

// Whether the reduced gradients are rounded to the compute dtype after the reduction: fp32
// gradients of a 16-bit run are (so that they hold what 16-bit gradients would, fp16 overflow
// as inf); 16-bit gradients are rounded by every add already.
bool rounds_reduced_gradients(const ReductionContext& context);
// Bytes of one gradient element: the store's gradient dtype (fp32, or 16-bit).
int64_t gradient_element_bytes(const ReductionContext& context);

// The one place a strategy is chosen. `fused`: the optimizer updates inside backward (no
// partition buffers: it reduces unit by unit). host_comm: MPI over host buffers for a compressed
// exchange put on MPI from a GPU.
std::unique_ptr<GradientReduction> make_gradient_reduction(const ReductionContext& context, const Optimizer& optimizer,
                                                           const OptimizerConfig& config, Communicator* host_comm);

// The strategies (one file each).
std::unique_ptr<GradientReduction> make_allreduce_reduction(const ReductionContext& context);
// The reduce-scatter of one bucket: out [S] <- the sum over ranks of their in's slice [W*S] (rank-major).
using ReduceScatterFn = std::function<Pending(Tensor out, Tensor in)>;
// `reduce_scatter` empty: the communicator's.
std::unique_ptr<GradientReduction> make_reduce_scatter_reduction(const ReductionContext& context, bool per_micro_batch,
                                                                 bool partitions, ReduceScatterFn reduce_scatter = {});
std::unique_ptr<GradientReduction> make_quantized_reduction(const ReductionContext& context, bool partitions);
std::unique_ptr<GradientReduction> make_one_rank_reduction(const ReductionContext& context);

// The bucket queue of the all-reduce and reduce-scatter strategies: units join a bucket as
// backward completes them; a bucket of reduce_bucket_size elements is reduced (one collective per
// group), at most one in flight (overlap_comm) or completed at once.
class BucketedReduction : public GradientReduction {
 public:
  explicit BucketedReduction(const ReductionContext& context) : context_(context) {}
  ~BucketedReduction() override;
  int64_t staging_bytes() const override { return peak_staging_; }

 protected:
  struct Part {
    ParamGroup group = ParamGroup::Decay;
    std::vector<UnitRange> units;  // ascending
    Pending pending;
  };
  virtual void start_part(Part& part) = 0;    // starts the part's collective (pending)
  virtual void finish_part(Part& part) = 0;   // after it completed
  virtual bool gives_back() const = 0;        // the units' full gradients are given back after reduction
  void enqueue(int unit);    // adds a unit to the bucket; flushes it when full
  void flush();              // reduces the bucket (completing the one in flight first)
  void complete();           // waits for the bucket in flight
  Tensor group_grads(ParamGroup group) const { return context_.store->group_grads(group); }

  ReductionContext context_;
  int64_t peak_staging_ = 0;

 private:
  struct Bucket {
    std::vector<Part> parts;
    std::vector<int> units;
  };
  std::vector<int> pending_;
  int64_t pending_numel_ = 0;
  std::unique_ptr<Bucket> inflight_;
};

}  // namespace zt
