// Evaluation over a whole split: forward passes only, sums all-reduced over MPI_COMM_WORLD.
#include "train/evaluation.h"

#include <mpi.h>

#include <cmath>
#include <vector>

#include "train/batch_views.h"

namespace zt {

EvalResult evaluate(CausalLM& model, const TokenDataset& data, int64_t micro_batch) {
  int rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<int64_t> mine;  // this rank's sample indices
  for (int64_t index = rank; index < data.num_samples(); index += world_size) mine.push_back(index);

  double sums[3] = {0.0, 0.0, 0.0};  // loss sum, target tokens, samples
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(micro_batch)) {
    const size_t count = std::min(mine.size() - first, static_cast<size_t>(micro_batch));
    MicroBatch micro = make_micro_batch(data, std::span<const int64_t>(mine.data() + first, count),
                                        static_cast<int32_t>(data.attributes().pad_id));
    BatchTensors batch = batch_views(micro);
    DropoutContext no_dropout;
    no_dropout.training = false;
    no_dropout.row_ids = batch.row_ids;
    model.forward(batch, no_dropout);
    sums[0] += model.loss(batch);
    sums[1] += static_cast<double>(micro.target_tokens);
    sums[2] += static_cast<double>(micro.batch);
  }
  ZT_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
           "evaluation: MPI_Allreduce of the loss sums failed");
  EvalResult result;
  result.target_tokens = static_cast<int64_t>(sums[1]);
  result.samples = static_cast<int64_t>(sums[2]);
  ZT_CHECK(result.target_tokens > 0, "evaluation data has no target tokens (every loss_mask is 0)");
  result.loss = sums[0] / sums[1];
  result.perplexity = std::exp(result.loss);
  return result;
}

}  // namespace zt
