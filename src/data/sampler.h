// The distributed sampler: which samples each rank reads in an epoch. It reproduces PyTorch's
// torch.utils.data.DistributedSampler exactly (torch 1.13), so a run ordered by zerotune sees
// the samples in the order a DeepSpeed/torch run with the same seed would.
#pragma once
#include <cstdint>
#include <vector>

namespace zt {

// torch.randperm(n, generator=g) on the CPU after g.manual_seed(seed): Fisher-Yates where step
// i swaps position i with i + (mt19937() % (n - i)), the mt19937 seeded with seed's low 32 bits
// (torch's CPUGeneratorImpl). Returns the permutation of 0..n-1 as a list of indices.
// Note: torch >= 2.x draws differently for n >= 2^32/20 (it switches to 64-bit draws); torch
// 1.13 uses the same 32-bit draws for every n, and so do we.
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

class DistributedSampler {
 public:
  // `num_samples` is the dataset's size (len(dataset) in torch). seed + epoch is computed in
  // uint64 (torch raises when it leaves [0, 2^64); we wrap, which only matters past 2^64).
  DistributedSampler(int64_t num_samples, int world_size, int rank, uint64_t seed, bool shuffle, bool drop_last);

  // The epoch's order of all ranks together, of length total_size(): the permutation (identity
  // without shuffle), padded by repeating it from its start (several times if needed) up to a
  // multiple of the world size, or truncated to one with drop_last.
  std::vector<int64_t> global_order(int64_t epoch) const;
  // This rank's samples for the epoch: global_order positions rank, rank + W, rank + 2W, ...
  std::vector<int64_t> rank_indices(int64_t epoch) const;

  int64_t num_samples_per_rank() const { return per_rank_; }  // len(sampler) in torch
  int64_t total_size() const { return per_rank_ * world_size_; }
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  int64_t per_rank_;
};

}  // namespace zt
