// Micro-batches: samples read from a TokenDataset, padded to the longest sample of the
// micro-batch (not to max_seq_len), with next-token targets and the loss mask shifted to match.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "data/token_shards.h"

namespace zt {

// row_ids = sample_global_index * kRowIdStride + position: a token's global identity, the key of
// its dropout numbers, so they do not depend on how samples are split over ranks and
// micro-batches. Samples are shorter than this stride (checked when a batch is made).
inline constexpr int64_t kRowIdStride = int64_t{1} << 20;

// A micro-batch of B rows padded to T = the longest of them: one sample per row, or several
// back to back under --packing (data/packing.h). Position t of a sample predicts its token t+1
// (the HF label shift); the sample's loss_mask[0] is never used, and its last token has no target.
struct MicroBatch {
  int64_t batch = 0;                  // B
  int64_t seq = 0;                    // T
  std::vector<int32_t> input_ids;     // [B*T] tokens[t], pad_id past the sample's end
  std::vector<int32_t> targets;       // [B*T] tokens[t+1], pad_id where there is none
  std::vector<uint8_t> loss_mask;     // [B*T] sample loss_mask[t+1]; 0 at the last real token and on padding
  std::vector<int64_t> row_ids;       // [B*T] sample index * kRowIdStride + position in the sample (padding included)
  std::vector<int64_t> sample_indices;  // [S] global indices of the micro-batch's samples (S = B unpacked), row by row
  // [B*T] each token's position within its sample (packed rows only; empty: t, one sample per
  // row). Padding after a packed row's last sample counts from 0 as a sample of its own.
  std::vector<int32_t> positions;
  int64_t target_tokens = 0;          // sum of loss_mask; a pair micro-batch: its pairs
  int64_t real_tokens = 0;            // positions holding a sample token (not padding)
  // A pair micro-batch (data/pair_batch.h) only: P pairs in B = 2P rows.
  int64_t pairs = 0;                  // P
  std::vector<int64_t> score_ends;    // [2P] per row: one past its last scored token
  std::vector<int64_t> divergences;   // [P] first position where the pair's two rows differ
};

// Reads the samples and lays them out as above. pad_id must be a valid token id.
MicroBatch make_micro_batch(const TokenDataset& dataset, std::span<const int64_t> sample_indices, int32_t pad_id);

// Writes one sample at element `offset` of the batch's vectors: input ids, targets and loss
// mask shifted by one inside the sample, row ids sample_index * kRowIdStride + position; adds its
// targets and tokens to target_tokens and real_tokens. The vectors must be sized already.
void place_sample(MicroBatch& batch, const TokenSample& sample, int64_t sample_index, size_t offset);
// An empty micro-batch of B x T: pad ids, no targets, row ids 0 (place_sample fills it).
MicroBatch padded_micro_batch(int64_t batch, int64_t seq, int32_t pad_id);
// Checks pad_id against the dataset's vocabulary and a sample length against kRowIdStride.
void check_batch_inputs(const TokenDataset& dataset, int32_t pad_id, int64_t longest, const char* caller);

// The number of target tokens of these samples (sum of loss_mask[1:] over them), i.e. the sum of
// target_tokens over any split of them into micro-batches: the trainer all-reduces it before
// backward so the loss is the mean over the global batch.
int64_t count_target_tokens(const TokenDataset& dataset, std::span<const int64_t> sample_indices);

// The (query, key) pairs causal attention computes for the micro-batch, each sample of length L
// counted as L^2 / 2 (the FLOP convention: half the L x L product): B * T^2 / 2 with one sample
// per row; packed rows add up their samples' (and their trailing padding's) halves, since the
// attention skips other samples' keys.
double causal_attention_pairs(const MicroBatch& batch);

}  // namespace zt
