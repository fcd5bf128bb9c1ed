// The reduce-scatter strategy (ZeRO stages 1-3 on several ranks): each rank keeps the sums of its
// partition (partition r of a group is every unit's slice r). Stage 1 reduces in the step's last
// micro-batch as backward completes the units (earlier micro-batches accumulate locally), stages
// 2/3 every micro-batch, giving each unit's full-size gradients back as soon as they are reduced.
// A bucket of several units is packed rank-major first (rank_major.h); one unit already is.
#include <algorithm>
#include <cmath>

#include "zero/gradient_reduction.h"
#include "zero/rank_major.h"

namespace zt {

namespace {

class ReduceScatterReduction final : public BucketedReduction {
 public:
  ReduceScatterReduction(const ReductionContext& context, bool per_micro_batch, bool partitions,
                         ReduceScatterFn reduce_scatter)
      : BucketedReduction(context), per_micro_batch_(per_micro_batch), dtype_(context.store->grad_dtype()),
        reduce_scatter_(std::move(reduce_scatter)) {
    if (!reduce_scatter_) {
      Communicator* comm = context.comm;
      reduce_scatter_ = [comm](Tensor out, Tensor in) { return comm->reduce_scatter_sum_async(out, in); };
    }
    for (ParamGroup group : kTrainableGroups) {
      Group& g = groups_[static_cast<size_t>(group)];
      g.partition_numel = context.store->group(group).numel / context.world;
      if (partitions && g.partition_numel)
        g.partition = Buffer(*context.backend, static_cast<size_t>(g.partition_numel) * dtype_size(dtype_));
    }
  }

  void begin_step(int64_t) override {
    last_ = false;
    for (ParamGroup group : kTrainableGroups)
      if (Group& g = groups_[static_cast<size_t>(group)]; g.partition.data())
        context_.backend->fill(flat_view(g.partition, dtype_, g.partition_numel), 0.0f);
  }
  void unit_ready(int unit) override {
    if (per_micro_batch_ || last_) enqueue(unit);
  }
  void end_micro_batch() override {
    if (!per_micro_batch_) return;
    flush();
    complete();
  }
  bool finish() override {
    if (!per_micro_batch_) {
      // Reduced during the last backward: complete the last bucket; else every unit now.
      if (!last_)
        for (int unit = context_.store->num_units() - 1; unit >= 0; --unit) enqueue(unit);
      flush();
      complete();
    }
    // In a step whose last micro-batch was marked, every slice was rounded as its bucket completed.
    if (last_) return true;
    if (rounds_reduced_gradients(context_))  // fp16 overflow becomes inf here
      for (Tensor partition : held()) context_.backend->round_to(partition, context_.compute_dtype);
    return false;
  }
  Tensor reduced(ParamGroup group) override {
    const Group& g = groups_[static_cast<size_t>(group)];
    return flat_view(g.partition, dtype_, g.partition_numel);
  }
  double gradient_norm() override {
    return std::sqrt(context_.comm->all_reduce_sum(context_.backend->sum_squares_of(held())));
  }
  bool overflow() override {
    return context_.comm->all_reduce_max(context_.backend->has_inf_or_nan_in(held()) ? 1.0 : 0.0) > 0.0;
  }
  Tensor reduce_unit(Tensor grads, Tensor scratch) override {
    reduce_scatter_(scratch, grads)->wait();
    return scratch;
  }
  bool reduces_per_micro_batch() const override { return per_micro_batch_; }
  std::vector<const void*> gradient_buffers() const override {
    std::vector<const void*> buffers;
    for (const Group& g : groups_)
      if (g.partition.data()) buffers.push_back(g.partition.data());
    return buffers;
  }
  int64_t gradient_bytes() const override {
    int64_t numel = 0, partition = 0;
    for (ParamGroup group : kTrainableGroups) {
      numel += context_.store->group(group).numel;
      partition += groups_[static_cast<size_t>(group)].partition_numel;
    }
    const int64_t f = gradient_element_bytes(context_);
    if (per_micro_batch_) return (partition + std::min(context_.zero.reduce_bucket_size, numel)) * f;
    return (numel + partition) * f;  // the full local gradients and the reduced partition
  }

 private:
  struct Group {
    int64_t partition_numel = 0;  // P
    Buffer partition;             // grad dtype [P]: this rank's reduced gradient slices
    Buffer staging_in, staging_out;  // grad dtype [W*S], [S]: bucket staging (grown as needed)
  };

  void start_part(Part& part) override {
    Group& g = groups_[static_cast<size_t>(part.group)];
    const int64_t per_rank = slice_numel(part.units, context_.world);
    Tensor grads = group_grads(part.group);
    Tensor in;
    if (part.units.size() == 1) {  // one unit is already rank-major: reduce it in place
      in = grads.rows(part.units[0].begin, part.units[0].numel);
    } else {
      ensure_buffer(g.staging_in, *context_.backend, per_rank * context_.world, dtype_);
      in = flat_view(g.staging_in, dtype_, per_rank * context_.world);
      pack_rank_major(*context_.backend, in, grads, part.units, context_.world);
    }
    ensure_buffer(g.staging_out, *context_.backend, per_rank, dtype_);
    peak_staging_ = std::max<int64_t>(peak_staging_, static_cast<int64_t>(g.staging_in.bytes() + g.staging_out.bytes()));
    part.pending = reduce_scatter_(flat_view(g.staging_out, dtype_, per_rank), in);
  }

  // The bucket's slices join this rank's partition; in the step's last micro-batch they hold
  // their final sums: rounded to the compute dtype now (fp32 gradients), and handed to the engine
  // (offload), so both overlap the rest of backward. 16-bit slices are added in fp32 and rounded
  // once per add (Backend::accumulate).
  void finish_part(Part& part) override {
    Group& g = groups_[static_cast<size_t>(part.group)];
    const int64_t per_rank = slice_numel(part.units, context_.world);
    Tensor partition = flat_view(g.partition, dtype_, g.partition_numel);
    add_slices(*context_.backend, partition, flat_view(g.staging_out, dtype_, per_rank), part.units, context_.world);
    if (!last_) return;
    const int64_t begin = part.units.front().begin / context_.world;
    Tensor slices = partition.rows(begin, per_rank);
    if (rounds_reduced_gradients(context_)) context_.backend->round_to(slices, context_.compute_dtype);
    context_.slices_final(part.group, begin, slices);
  }
  bool gives_back() const override { return true; }

  std::vector<Tensor> held() {
    std::vector<Tensor> views;
    for (ParamGroup group : kTrainableGroups)
      if (groups_[static_cast<size_t>(group)].partition_numel) views.push_back(reduced(group));
    return views;
  }

  bool per_micro_batch_;
  DType dtype_;  // the gradients' (the store's grad dtype)
  ReduceScatterFn reduce_scatter_;
  Group groups_[kParamGroups];
};

}  // namespace

std::unique_ptr<GradientReduction> make_reduce_scatter_reduction(const ReductionContext& context, bool per_micro_batch,
                                                                 bool partitions, ReduceScatterFn reduce_scatter) {
  return std::make_unique<ReduceScatterReduction>(context, per_micro_batch, partitions, std::move(reduce_scatter));
}

}  // namespace zt
