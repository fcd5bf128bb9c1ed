// StepSamples: which samples each optimizer step takes and which of them this rank trains on.
// Step b takes positions [b*G, (b+1)*G) of the epoch's DistributedSampler order (G the global
// batch; --group-by-length regroups them by length: the same global batch, so the same loss);
// this rank takes positions rank, rank + W, ... of them, and micro-batch m its [m*mb, (m+1)*mb).
// --packing (data/packing.h) changes how each micro-batch's samples are laid out in rows, not
// which samples a step, a rank or a micro-batch has: the global batch, the epoch order and the
// resume position (a step number) mean the same with and without it.
#pragma once
#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "data/batch_prefetcher.h"
#include "data/sampler.h"
#include "data/token_shards.h"

namespace zt {

class StepSamples {
 public:
  StepSamples(const TokenDataset& dataset, int world_size, int rank, uint64_t seed, bool shuffle,
              int64_t global_batch, int64_t micro_batch, bool group_by_length, int64_t packing_capacity);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // This rank's samples of step `step` ([G/W] dataset indices), in micro-batch order.
  std::vector<int64_t> rank_samples(int64_t step);
  // This rank's micro-batches of step `step` (built from the shards; not thread-safe: one caller).
  StepBatches rank_batches(int64_t step);

 private:
  const TokenDataset& dataset_;
  DistributedSampler sampler_;
  int world_size_, rank_;
  int64_t global_batch_, micro_batch_;
  bool group_by_length_;
  int64_t packing_capacity_;  // tokens per packed row; 0: no packing (one padded row per sample)
  int64_t steps_per_epoch_ = 0;
  std::vector<int64_t> order_;  // the epoch's sample order (global positions)
  int64_t order_epoch_ = -1;
};

}  // namespace zt
