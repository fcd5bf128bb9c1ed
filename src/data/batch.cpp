// Micro-batch building (layout in batch.h).
#include "data/batch.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

MicroBatch make_micro_batch(const TokenDataset& dataset, std::span<const int64_t> sample_indices, int32_t pad_id) {
  ZT_CHECK(!sample_indices.empty(), "make_micro_batch: no samples given");
  const int64_t vocab_size = dataset.attributes().vocab_size;
  ZT_CHECK(pad_id >= 0 && pad_id < vocab_size, "make_micro_batch: pad_id ", pad_id, " is outside [0, vocab_size=",
           vocab_size, ")");

  MicroBatch batch;
  batch.batch = static_cast<int64_t>(sample_indices.size());
  batch.sample_indices.assign(sample_indices.begin(), sample_indices.end());
  for (int64_t index : sample_indices) batch.seq = std::max(batch.seq, dataset.sample_length(index));
  ZT_CHECK(batch.seq <= kRowIdStride, "make_micro_batch: a sample of ", batch.seq,
           " tokens is longer than the row-id stride ", kRowIdStride);

  const size_t T = static_cast<size_t>(batch.seq);
  const size_t elements = static_cast<size_t>(batch.batch) * T;
  batch.input_ids.assign(elements, pad_id);
  batch.targets.assign(elements, pad_id);
  batch.loss_mask.assign(elements, 0);
  batch.row_ids.resize(elements);
  for (size_t b = 0; b < sample_indices.size(); ++b) {
    const TokenSample sample = dataset.read_sample(sample_indices[b]);
    const size_t length = sample.tokens.size();
    int32_t* input_row = &batch.input_ids[b * T];   // [T]
    int32_t* target_row = &batch.targets[b * T];   // [T]
    uint8_t* mask_row = &batch.loss_mask[b * T];   // [T]
    int64_t* row_id_row = &batch.row_ids[b * T];   // [T]
    for (size_t t = 0; t < length; ++t) input_row[t] = sample.tokens[t];
    for (size_t t = 0; t + 1 < length; ++t) {
      target_row[t] = sample.tokens[t + 1];
      mask_row[t] = sample.loss_mask[t + 1];
      batch.target_tokens += sample.loss_mask[t + 1];
    }
    for (size_t t = 0; t < T; ++t) row_id_row[t] = sample_indices[b] * kRowIdStride + static_cast<int64_t>(t);
    batch.real_tokens += static_cast<int64_t>(length);
  }
  return batch;
}

int64_t count_target_tokens(const TokenDataset& dataset, std::span<const int64_t> sample_indices) {
  int64_t count = 0;
  for (int64_t index : sample_indices) {
    const std::vector<uint8_t> loss_mask = dataset.read_loss_mask(index);  // [L]
    for (size_t t = 1; t < loss_mask.size(); ++t) count += loss_mask[t];
  }
  return count;
}

}  // namespace zt
