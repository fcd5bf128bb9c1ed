// StepSamples (see step_samples.h).
#include "data/step_samples.h"

#include <span>

#include "core/error.h"
#include "data/length_grouping.h"
#include "data/packing.h"
#include "data/pair_batch.h"

namespace zt {

StepSamples::StepSamples(const TokenDataset& dataset, int world_size, int rank, uint64_t seed, bool shuffle,
                         int64_t global_batch, int64_t micro_batch, bool group_by_length,
                         int64_t packing_capacity)
    : dataset_(dataset),
      sampler_(dataset.num_samples(), world_size, rank, seed, shuffle, false),
      world_size_(world_size),
      rank_(rank),
      global_batch_(global_batch),
      micro_batch_(micro_batch),
      group_by_length_(group_by_length),
      packing_capacity_(packing_capacity) {
  ZT_CHECK(global_batch > 0 && global_batch % world_size == 0 && (global_batch / world_size) % micro_batch == 0,
           "step samples: global batch ", global_batch, " is not micro-batch ", micro_batch, " x accumulation x ",
           world_size, " ranks");
  steps_per_epoch_ = sampler_.num_samples_per_rank() * world_size / global_batch;
}

std::vector<int64_t> StepSamples::rank_samples(int64_t step) {
  const int64_t epoch = step / steps_per_epoch_;
  if (epoch != order_epoch_) {
    order_ = sampler_.global_order(epoch);
    order_epoch_ = epoch;
  }
  const int64_t first = (step % steps_per_epoch_) * global_batch_;
  std::vector<int64_t> batch(order_.begin() + first, order_.begin() + first + global_batch_);  // [G]
  if (group_by_length_) {
    std::vector<int64_t> lengths;
    for (int64_t sample : batch) lengths.push_back(dataset_.sample_length(sample));
    batch = group_by_length(batch, lengths, world_size_, micro_batch_);
  }
  std::vector<int64_t> mine;  // [G/W]
  for (int64_t k = 0; k < global_batch_ / world_size_; ++k)
    mine.push_back(batch[static_cast<size_t>(rank_ + k * world_size_)]);
  return mine;
}

StepBatches StepSamples::rank_batches(int64_t step) {
  const std::vector<int64_t> mine = rank_samples(step);
  StepBatches batches;
  batches.step = step;
  const std::span<const int64_t> samples(mine);
  const int32_t pad_id = static_cast<int32_t>(dataset_.attributes().pad_id);
  for (size_t first = 0; first < samples.size(); first += static_cast<size_t>(micro_batch_)) {
    const std::span<const int64_t> micro = samples.subspan(first, static_cast<size_t>(micro_batch_));
    if (dataset_.holds_pairs())  // a pair is one sample: both sides stay on this rank, in this micro-batch
      batches.micro.push_back(make_pair_micro_batch(dataset_, micro, pad_id));
    else
      batches.micro.push_back(packing_capacity_ > 0 ? make_packed_micro_batch(dataset_, micro, pad_id, packing_capacity_)
                                                    : make_micro_batch(dataset_, micro, pad_id));
  }
  return batches;
}

}  // namespace zt
