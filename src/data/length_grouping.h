// Sample-length utilities of batching: `--group-by-length` (reorder one global batch so every
// micro-batch holds samples of similar length, which cuts padding), the padding fraction of a
// micro-batch, and the nearest-rank length percentile that reports use.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace zt {

// One global batch's samples, reordered for length grouping.
//   batch_samples  [G] global sample indices in DistributedSampler step order: rank r takes list
//                  positions r, r+W, r+2W, ... and its micro-batch m is its elements
//                  [m*micro_batch, (m+1)*micro_batch)
//   lengths        [G] tokens of each of those samples (lengths[i] belongs to batch_samples[i])
// Returns [G]: the same samples (the same multiset, so the global batch and its loss do not
// change) placed so that each (rank, micro-batch) slot holds micro_batch samples of similar
// length: the samples sorted by length, longest first (the first micro-step meets the peak
// memory at once), ties by position in the list; cut into chunks of micro_batch; chunk c goes to
// micro-batch c / W of rank c % W, so the ranks of one micro-step get similar lengths too.
// Deterministic: every rank computes the same list. G must be a multiple of W * micro_batch.
std::vector<int64_t> group_by_length(std::span<const int64_t> batch_samples, std::span<const int64_t> lengths,
                                     int world_size, int64_t micro_batch);

// Padding positions / all positions of one micro-batch padded to its longest sample:
// 1 - sum(lengths) / (B * max(lengths)). 0 for an empty list.
double padding_fraction(std::span<const int64_t> micro_batch_lengths);

// The same over a whole global batch laid out as above (lengths in list order, [G]): padded
// positions of all W * accumulation micro-batches over all their positions.
double global_batch_padding_fraction(std::span<const int64_t> lengths, int world_size, int64_t micro_batch);

// The value at percentile `percent` of `sorted` (ascending), nearest rank: the
// ceil(percent/100 * n)-th smallest. 0 for an empty list.
int64_t nearest_rank_percentile(std::span<const int64_t> sorted, int percent);

}  // namespace zt
