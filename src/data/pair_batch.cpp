// Pair micro-batches (layout in pair_batch.h).
#include "data/pair_batch.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

namespace {

// One past the last scored token of a side's sequence (scored tokens are a prefix of its response).
int64_t score_end(const TokenSample& sequence) {
  int64_t end = 0;
  for (size_t t = 0; t < sequence.loss_mask.size(); ++t)
    if (sequence.loss_mask[t]) end = static_cast<int64_t>(t) + 1;
  return end;
}

// The first position where the two sequences differ; -1 when they are identical.
int64_t first_difference(const TokenSample& a, const TokenSample& b) {
  const size_t common = std::min(a.tokens.size(), b.tokens.size());
  for (size_t t = 0; t < common; ++t)
    if (a.tokens[t] != b.tokens[t]) return static_cast<int64_t>(t);
  return a.tokens.size() == b.tokens.size() ? -1 : static_cast<int64_t>(common);
}

}  // namespace

MicroBatch make_pair_micro_batch(const TokenDataset& dataset, std::span<const int64_t> pair_indices, int32_t pad_id) {
  ZT_CHECK(!pair_indices.empty(), "make_pair_micro_batch: no pairs given");
  const int64_t pairs = static_cast<int64_t>(pair_indices.size());
  std::vector<TokenSample> rows(static_cast<size_t>(2 * pairs));  // [2P] chosen rows, then rejected rows
  int64_t longest = 0;
  for (int64_t p = 0; p < pairs; ++p) {
    const TokenPair pair = dataset.read_pair(pair_indices[static_cast<size_t>(p)]);
    rows[static_cast<size_t>(p)] = pair.chosen_sequence();
    rows[static_cast<size_t>(pairs + p)] = pair.rejected_sequence();
    longest = std::max({longest, static_cast<int64_t>(rows[static_cast<size_t>(p)].tokens.size()),
                        static_cast<int64_t>(rows[static_cast<size_t>(pairs + p)].tokens.size())});
  }
  check_batch_inputs(dataset, pad_id, longest, "make_pair_micro_batch");
  MicroBatch batch = padded_micro_batch(2 * pairs, longest, pad_id);
  batch.pairs = pairs;
  const size_t T = static_cast<size_t>(longest);
  for (size_t row = 0; row < rows.size(); ++row) {
    // Dropout keys: the chosen side of pair i is row id 2i, the rejected side 2i + 1.
    const int64_t pair = pair_indices[row % static_cast<size_t>(pairs)];
    const int64_t row_key = 2 * pair + (row < static_cast<size_t>(pairs) ? 0 : 1);
    for (size_t t = 0; t < T; ++t) batch.row_ids[row * T + t] = row_key * kRowIdStride + static_cast<int64_t>(t);
    place_sample(batch, rows[row], row_key, row * T);
    batch.score_ends.push_back(score_end(rows[row]));
    if (row < static_cast<size_t>(pairs)) batch.sample_indices.push_back(pair);
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t difference = first_difference(rows[static_cast<size_t>(p)], rows[static_cast<size_t>(pairs + p)]);
    batch.divergences.push_back(difference >= 0 ? difference : batch.score_ends[static_cast<size_t>(p)] - 1);
  }
  batch.target_tokens = pairs;  // the loss averages over pairs (targets and loss_mask stay: DPO's log-probs)
  return batch;
}

PairSpan pair_loss_span(const MicroBatch& batch, int64_t pair) {
  const int64_t chosen_end = batch.score_ends[static_cast<size_t>(pair)];
  const int64_t rejected_end = batch.score_ends[static_cast<size_t>(batch.pairs + pair)];
  const int64_t divergence = batch.divergences[static_cast<size_t>(pair)];
  return PairSpan{divergence, std::max({chosen_end, rejected_end, divergence + 1})};
}

}  // namespace zt
