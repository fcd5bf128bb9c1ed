// Micro-batches of preference pairs (pair shards, data/token_shards.h) for the reward objective
// (train/reward_objective.cpp), laid out as DeepSpeed-Chat's DataCollatorReward does: P pairs
// give B = 2P rows, rows [0, P) the chosen sequences and rows [P, 2P) the rejected ones, in the
// pairs' order, right-padded with pad_id to T = the longest of them. A pair is one sample of the
// sampler, so both of its sides are always on the same rank and in the same micro-batch.
// Per pair the batch also records, from the unpadded sequences:
//   score_ends[row]   one past the row's last scored token (DeepSpeed-Chat's c_ind / r_ind:
//                     the reward is the value at score_end - 1)
//   divergences[p]    the first position where chosen and rejected differ (a sequence that is a
//                     prefix of the other differs from it at its own end); score_end - 1 of the
//                     chosen row when the two sequences are identical (the loss is then log 2)
// targets and loss_mask are each row's own (place_sample's: the scored response tokens), which
// the DPO objective sums log-probabilities over (the reward objective reads neither);
// target_tokens is P, the pairs (the loss averages over pairs).
#pragma once
#include <span>

#include "data/batch.h"

namespace zt {

MicroBatch make_pair_micro_batch(const TokenDataset& dataset, std::span<const int64_t> pair_indices, int32_t pad_id);

// The positions [divergence, end) over which a pair's loss averages: end = the larger score end
// (DeepSpeed-Chat's end_ind); for identical sequences [score_end - 1, score_end).
struct PairSpan {
  int64_t begin = 0, end = 0;
};
PairSpan pair_loss_span(const MicroBatch& batch, int64_t pair);

}  // namespace zt
