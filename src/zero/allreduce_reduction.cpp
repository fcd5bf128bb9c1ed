// The all-reduce strategy (ZeRO stage 0 on several ranks): every rank holds the whole summed
// gradient. In the step's last micro-batch the units' gradients are all-reduced in place bucket
// by bucket as backward completes them (earlier micro-batches accumulate locally); without that
// mark, all at once in reduce_bucket_size pieces at finish().
#include <algorithm>
#include <cmath>

#include "zero/gradient_reduction.h"

namespace zt {

namespace {

class AllReduceReduction final : public BucketedReduction {
 public:
  using BucketedReduction::BucketedReduction;

  void begin_step(int64_t) override { last_ = false; }
  void unit_ready(int unit) override {
    if (last_) enqueue(unit);
  }
  bool finish() override {
    if (last_) {  // reduced during the last backward: complete the last bucket
      flush();
      complete();
    } else {
      for (ParamGroup group : kTrainableGroups) {
        Tensor grads = group_grads(group);
        const int64_t numel = context_.store->group(group).numel;
        for (int64_t begin = 0; begin < numel; begin += context_.zero.reduce_bucket_size)
          context_.comm->all_reduce_sum(grads.rows(begin, std::min(context_.zero.reduce_bucket_size, numel - begin)));
      }
    }
    if (rounds_reduced_gradients(context_))  // fp16 overflow becomes inf here
      for (Tensor grads : held()) context_.backend->round_to(grads, context_.compute_dtype);
    return false;
  }
  Tensor reduced(ParamGroup group) override { return group_grads(group); }
  double gradient_norm() override { return std::sqrt(context_.backend->sum_squares_of(held())); }
  bool overflow() override {
    return context_.comm->all_reduce_max(context_.backend->has_inf_or_nan_in(held()) ? 1.0 : 0.0) > 0.0;
  }
  Tensor reduce_unit(Tensor grads, Tensor) override {
    context_.comm->all_reduce_sum(grads);
    return grads;
  }
  int64_t gradient_bytes() const override {
    int64_t numel = 0;
    for (ParamGroup group : kTrainableGroups) numel += context_.store->group(group).numel;
    return numel * gradient_element_bytes(context_);
  }

 private:
  // The bucket's units are one contiguous range of the group: all-reduced in place.
  void start_part(Part& part) override {
    const int64_t begin = part.units.front().begin;
    const int64_t end = part.units.back().begin + part.units.back().numel;
    part.pending = context_.comm->all_reduce_sum_async(group_grads(part.group).rows(begin, end - begin));
  }
  void finish_part(Part&) override {}  // reduced in place, and kept: every rank updates from all of it
  bool gives_back() const override { return false; }
  std::vector<Tensor> held() const {
    std::vector<Tensor> views;
    for (ParamGroup group : kTrainableGroups)
      if (context_.store->group(group).numel) views.push_back(group_grads(group));
    return views;
  }
};

}  // namespace

std::unique_ptr<GradientReduction> make_allreduce_reduction(const ReductionContext& context) {
  return std::make_unique<AllReduceReduction>(context);
}

}  // namespace zt
