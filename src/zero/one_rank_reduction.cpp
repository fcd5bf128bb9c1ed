// The strategy of a job with one rank: its gradients are the sums already. From stage 1 (where
// the engine updates its partition, here all of it, straight from the store's gradients) the
// step's last micro-batch finishes each unit's gradients as backward completes it, as the
// reduce-scatter strategy does bucket by bucket.
#include <cmath>

#include "zero/gradient_reduction.h"

namespace zt {

namespace {

class OneRankReduction final : public GradientReduction {
 public:
  explicit OneRankReduction(const ReductionContext& context) : context_(context) {}

  void begin_step(int64_t) override { last_ = false; }
  void unit_ready(int unit) override {
    if (context_.stage == 0 || !last_) return;
    for (ParamGroup group : kTrainableGroups) {
      const UnitRange range = context_.store->unit_range(group, unit);
      if (!range.numel) continue;
      Tensor slices = reduced(group).rows(range.begin, range.numel);
      if (rounds_reduced_gradients(context_)) context_.backend->round_to(slices, context_.compute_dtype);
      context_.slices_final(group, range.begin, slices);
    }
  }
  bool finish() override {
    if (context_.stage >= 1 && last_) return true;
    if (rounds_reduced_gradients(context_))
      for (Tensor grads : held()) context_.backend->round_to(grads, context_.compute_dtype);
    return false;
  }
  Tensor reduced(ParamGroup group) override { return context_.store->group_grads(group); }
  double gradient_norm() override {
    double squares = context_.backend->sum_squares_of(held());
    if (context_.stage >= 1) squares = context_.comm->all_reduce_sum(squares);  // one rank: itself
    return std::sqrt(squares);
  }
  bool overflow() override {
    return context_.comm->all_reduce_max(context_.backend->has_inf_or_nan_in(held()) ? 1.0 : 0.0) > 0.0;
  }
  Tensor reduce_unit(Tensor grads, Tensor) override { return grads; }
  int64_t gradient_bytes() const override {
    int64_t numel = 0;
    for (ParamGroup group : kTrainableGroups) numel += context_.store->group(group).numel;
    return numel * gradient_element_bytes(context_);
  }

 private:
  std::vector<Tensor> held() const {
    std::vector<Tensor> views;
    for (ParamGroup group : kTrainableGroups)
      if (context_.store->group(group).numel) views.push_back(context_.store->group_grads(group));
    return views;
  }

  ReductionContext context_;
};

}  // namespace

std::unique_ptr<GradientReduction> make_one_rank_reduction(const ReductionContext& context) {
  return std::make_unique<OneRankReduction>(context);
}

}  // namespace zt
