// DistributedSampler and torch's CPU randperm (see sampler.h for the semantics reproduced).
#include "data/sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "core/error.h"

namespace zt {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  ZT_CHECK(n >= 0, "randperm: n must be non-negative, not ", n);
  // torch's mt19937 seeding (init_with_uint32 of seed & 0xffffffff) is the standard one.
  std::mt19937 generator(static_cast<uint32_t>(seed & 0xffffffffu));
  std::vector<int64_t> order(static_cast<size_t>(n));  // [n]
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t offset = static_cast<int64_t>(static_cast<uint32_t>(generator()) % static_cast<uint64_t>(n - i));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(i + offset)]);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t num_samples, int world_size, int rank, uint64_t seed, bool shuffle,
                                       bool drop_last)
    : dataset_size_(num_samples), world_size_(world_size), rank_(rank), seed_(seed), shuffle_(shuffle),
      drop_last_(drop_last) {
  ZT_CHECK(num_samples >= 0, "sampler: the number of samples must be non-negative, not ", num_samples);
  ZT_CHECK(world_size >= 1, "sampler: world size must be at least 1, not ", world_size);
  ZT_CHECK(rank >= 0 && rank < world_size, "sampler: rank ", rank, " is outside [0, ", world_size, ")");
  // torch: drop_last and n % W != 0 -> ceil((n - W) / W), which is floor(n / W) (0 when n < W);
  // otherwise ceil(n / W).
  per_rank_ = drop_last ? num_samples / world_size : (num_samples + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::global_order(int64_t epoch) const {
  std::vector<int64_t> permutation;  // [n]
  if (shuffle_) {
    permutation = torch_randperm(dataset_size_, seed_ + static_cast<uint64_t>(epoch));
  } else {
    permutation.resize(static_cast<size_t>(dataset_size_));
    std::iota(permutation.begin(), permutation.end(), int64_t{0});
  }
  // Padding repeats the list from its start as often as needed, i.e. position p holds
  // permutation[p % n]; truncation keeps the first total_size(). Both are this one loop.
  std::vector<int64_t> order(static_cast<size_t>(total_size()));  // [total_size]
  for (size_t p = 0; p < order.size(); ++p) order[p] = permutation[p % permutation.size()];
  return order;
}

std::vector<int64_t> DistributedSampler::rank_indices(int64_t epoch) const {
  const std::vector<int64_t> order = global_order(epoch);
  std::vector<int64_t> mine;  // [num_samples_per_rank]
  mine.reserve(static_cast<size_t>(per_rank_));
  for (size_t p = static_cast<size_t>(rank_); p < order.size(); p += static_cast<size_t>(world_size_)) {
    mine.push_back(order[p]);
  }
  return mine;
}

}  // namespace zt
