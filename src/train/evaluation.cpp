// Evaluation over a whole split: forward passes only, sums all-reduced over the ranks.
#include "train/evaluation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "train/batch_views.h"

namespace zt {

void for_each_eval_micro_batch(
    CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm, Backend& backend,
    const std::function<MicroBatch(std::span<const int64_t>)>& make,
    const std::function<void(const MicroBatch&, const BatchTensors&)>& visit,
    const std::function<void(const MicroBatch&, const BatchTensors&, const DropoutContext&)>& forward) {
  DeviceBatchStorage device_batch;
  const int rank = comm.rank(), world_size = comm.size();
  std::vector<int64_t> mine;  // this rank's record indices
  for (int64_t index = rank; index < data.num_samples(); index += world_size) mine.push_back(index);
  const int64_t most_per_rank = (data.num_samples() + world_size - 1) / world_size;
  const int64_t rounds = (most_per_rank + micro_batch - 1) / micro_batch;  // the same on every rank
  for (int64_t round = 0; round < rounds; ++round) {
    const size_t first = static_cast<size_t>(round * micro_batch);
    const bool counted = first < mine.size();
    const int64_t filler = 0;  // a rank without records left runs record 0 and ignores it
    const std::span<const int64_t> records =
        counted ? std::span<const int64_t>(mine.data() + first, std::min(mine.size() - first, static_cast<size_t>(micro_batch)))
                : std::span<const int64_t>(&filler, 1);
    MicroBatch micro = make(records);  // batch_views may fill in positions
    BatchTensors batch = batch_views(micro, backend, device_batch);
    DropoutContext no_dropout;
    no_dropout.training = false;
    no_dropout.row_ids = batch.row_ids;
    if (forward) forward(micro, batch, no_dropout);
    else model.forward(batch, no_dropout);
    if (counted) visit(micro, batch);
  }
}

std::array<double, 3> eval_sums(
    CausalLM& model, CausalLM* head, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
    Backend& backend,
    const std::function<void(const MicroBatch&, const BatchTensors&, const DropoutContext&)>& forward) {
  std::array<double, 3> sums = {0.0, 0.0, 0.0};  // loss sum, target tokens, samples
  for_each_eval_micro_batch(
      model, data, micro_batch, comm, backend,
      [&](std::span<const int64_t> samples) {
        return make_micro_batch(data, samples, static_cast<int32_t>(data.attributes().pad_id));
      },
      [&](const MicroBatch& micro, const BatchTensors& batch) {
        if (!head) return;
        sums[0] += head->loss(batch);
        sums[1] += static_cast<double>(micro.target_tokens);
        sums[2] += static_cast<double>(micro.batch);
      },
      forward);
  return sums;
}

EvalResult evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch, Communicator& comm,
                    Backend& backend) {
  std::array<double, 3> sums = eval_sums(model, &model, data, micro_batch, comm, backend);
  comm.all_reduce_scalars(sums);
  return eval_result_of(sums);
}

EvalResult eval_result_of(std::span<const double, 3> sums) {
  EvalResult result;
  result.target_tokens = static_cast<int64_t>(sums[1]);
  result.samples = static_cast<int64_t>(sums[2]);
  ZT_CHECK(result.target_tokens > 0, "evaluation data has no target tokens (every loss_mask is 0)");
  result.loss = sums[0] / sums[1];
  result.perplexity = std::exp(result.loss);
  return result;
}

}  // namespace zt
