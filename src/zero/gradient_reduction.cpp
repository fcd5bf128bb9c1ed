// The choice of the gradient-reduction strategy, and the bucket queue the exact ones share (see
// gradient_reduction.h).
#include "zero/gradient_reduction.h"

#include <algorithm>
#include <exception>

#include "zero/compressed_reduction.h"
#include "zero/rank_major.h"

namespace zt {

bool rounds_reduced_gradients(const ReductionContext& context) {
  return context.compute_dtype != DType::F32 && context.store->grad_dtype() == DType::F32;
}

int64_t gradient_element_bytes(const ReductionContext& context) {
  return static_cast<int64_t>(dtype_size(context.store->grad_dtype()));
}

std::unique_ptr<GradientReduction> make_gradient_reduction(const ReductionContext& context, const Optimizer& optimizer,
                                                           const OptimizerConfig& config, Communicator* host_comm) {
  const bool exchanges = optimizer.exchanges_momentum();
  std::unique_ptr<GradientReduction> exact;
  if (context.world == 1) exact = make_one_rank_reduction(context);
  else if (context.stage == 0) exact = make_allreduce_reduction(context);
  // A compressed exchange needs each rank's whole local gradient: stage 2 then reduces like
  // stage 1 in the steps that reduce (a worker compresses its whole vector).
  else if (context.zero.zero_quantized_gradients) exact = make_quantized_reduction(context, !optimizer.fuses_into_backward());
  else exact = make_reduce_scatter_reduction(context, context.stage >= 2 && !exchanges, !optimizer.fuses_into_backward());
  if (!exchanges) return exact;
  return std::make_unique<CompressedReduction>(context, std::move(exact), optimizer, config.comm_backend_name, host_comm);
}

// ---- the bucket queue ------------------------------------------------------------------------------

BucketedReduction::~BucketedReduction() {
  // Complete what is in flight before the buffers it writes go away; unless unwinding from an
  // error: then the job is ending, and a collective whose peer failed would hold this rank.
  if (std::uncaught_exceptions() > 0 || !inflight_) return;
  try {
    for (Part& part : inflight_->parts) part.pending->wait();
  } catch (...) {  // unwinding from another error: that one is reported
  }
}

void BucketedReduction::enqueue(int unit) {
  pending_.push_back(unit);
  for (ParamGroup group : kTrainableGroups) pending_numel_ += context_.store->unit_range(group, unit).numel;
  if (pending_numel_ >= context_.zero.reduce_bucket_size) flush();
}

void BucketedReduction::flush() {
  complete();
  if (pending_.empty()) return;
  auto bucket = std::make_unique<Bucket>();
  bucket->units = pending_;
  std::vector<int> ascending = pending_;
  std::sort(ascending.begin(), ascending.end());
  for (ParamGroup group : kTrainableGroups) {
    Part part;
    part.group = group;
    for (int unit : ascending)
      if (context_.store->unit_range(group, unit).numel) part.units.push_back(context_.store->unit_range(group, unit));
    if (!slice_numel(part.units, context_.world)) continue;
    start_part(part);
    bucket->parts.push_back(std::move(part));
  }
  pending_.clear();
  pending_numel_ = 0;
  inflight_ = std::move(bucket);
  if (!context_.zero.overlap_comm) complete();
}

void BucketedReduction::complete() {
  if (!inflight_) return;
  std::unique_ptr<Bucket> bucket = std::move(inflight_);
  for (Part& part : bucket->parts) {
    part.pending->wait();
    finish_part(part);
  }
  if (!gives_back()) return;
  // The full-size gradients of these units are reduced: give their memory back.
  for (int unit : bucket->units) {
    for (ParamGroup group : kTrainableGroups) {
      const UnitRange range = context_.store->unit_range(group, unit);
      if (range.numel) context_.backend->discard(group_grads(group).rows(range.begin, range.numel));
    }
    context_.released(unit);
  }
}

}  // namespace zt
