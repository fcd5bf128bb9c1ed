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

// A micro-batch of B samples padded to T = the longest of them. Position t of row b predicts
// token t+1 of the sample (the HF label shift); the sample's loss_mask[0] is never used.
struct MicroBatch {
  int64_t batch = 0;                  // B
  int64_t seq = 0;                    // T
  std::vector<int32_t> input_ids;     // [B*T] tokens[t], pad_id past the sample's end
  std::vector<int32_t> targets;       // [B*T] tokens[t+1], pad_id where there is none
  std::vector<uint8_t> loss_mask;     // [B*T] sample loss_mask[t+1]; 0 at the last real token and on padding
  std::vector<int64_t> row_ids;       // [B*T] sample_indices[b] * kRowIdStride + t (padding included)
  std::vector<int64_t> sample_indices;  // [B] global sample index of each row
  int64_t target_tokens = 0;          // sum of loss_mask
  int64_t real_tokens = 0;            // positions holding a sample token (not padding)
};

// Reads the samples and lays them out as above. pad_id must be a valid token id.
MicroBatch make_micro_batch(const TokenDataset& dataset, std::span<const int64_t> sample_indices, int32_t pad_id);

// The number of target tokens of these samples (sum of loss_mask[1:] over them), i.e. the sum of
// target_tokens over any split of them into micro-batches: the trainer all-reduces it before
// backward so the loss is the mean over the global batch.
int64_t count_target_tokens(const TokenDataset& dataset, std::span<const int64_t> sample_indices);

}  // namespace zt
