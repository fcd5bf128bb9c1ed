// Micro-batch building (layout in batch.h).
#include "data/batch.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

void check_batch_inputs(const TokenDataset& dataset, int32_t pad_id, int64_t longest, const char* caller) {
  const int64_t vocab_size = dataset.attributes().vocab_size;
  ZT_CHECK(pad_id >= 0 && pad_id < vocab_size, caller, ": pad_id ", pad_id, " is outside [0, vocab_size=", vocab_size,
           ")");
  ZT_CHECK(longest <= kRowIdStride, caller, ": a sample of ", longest, " tokens is longer than the row-id stride ",
           kRowIdStride);
}

MicroBatch padded_micro_batch(int64_t batch_rows, int64_t seq, int32_t pad_id) {
  MicroBatch batch;
  batch.batch = batch_rows;
  batch.seq = seq;
  const size_t elements = static_cast<size_t>(batch_rows * seq);
  batch.input_ids.assign(elements, pad_id);
  batch.targets.assign(elements, pad_id);
  batch.loss_mask.assign(elements, 0);
  batch.row_ids.assign(elements, 0);
  return batch;
}

void place_sample(MicroBatch& batch, const TokenSample& sample, int64_t sample_index, size_t offset) {
  const size_t length = sample.tokens.size();
  ZT_CHECK(offset + length <= batch.input_ids.size(), "place_sample: sample ", sample_index, " of ", length,
           " tokens at offset ", offset, " overruns the micro-batch of ", batch.input_ids.size(), " positions");
  int32_t* input = &batch.input_ids[offset];   // [L]
  int32_t* target = &batch.targets[offset];    // [L]
  uint8_t* mask = &batch.loss_mask[offset];    // [L]
  int64_t* row_id = &batch.row_ids[offset];    // [L]
  for (size_t t = 0; t < length; ++t) {
    input[t] = sample.tokens[t];
    row_id[t] = sample_index * kRowIdStride + static_cast<int64_t>(t);
  }
  for (size_t t = 0; t + 1 < length; ++t) {
    target[t] = sample.tokens[t + 1];
    mask[t] = sample.loss_mask[t + 1];
    batch.target_tokens += sample.loss_mask[t + 1];
  }
  batch.real_tokens += static_cast<int64_t>(length);
}

MicroBatch make_micro_batch(const TokenDataset& dataset, std::span<const int64_t> sample_indices, int32_t pad_id) {
  ZT_CHECK(!sample_indices.empty(), "make_micro_batch: no samples given");
  int64_t longest = 0;
  for (int64_t index : sample_indices) longest = std::max(longest, dataset.sample_length(index));
  check_batch_inputs(dataset, pad_id, longest, "make_micro_batch");

  MicroBatch batch = padded_micro_batch(static_cast<int64_t>(sample_indices.size()), longest, pad_id);
  batch.sample_indices.assign(sample_indices.begin(), sample_indices.end());
  const size_t T = static_cast<size_t>(batch.seq);
  for (size_t b = 0; b < sample_indices.size(); ++b) {
    // Row ids of the whole row (padding included) continue the sample's: sample * stride + t.
    for (size_t t = 0; t < T; ++t) batch.row_ids[b * T + t] = sample_indices[b] * kRowIdStride + static_cast<int64_t>(t);
    place_sample(batch, dataset.read_sample(sample_indices[b]), sample_indices[b], b * T);
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

double causal_attention_pairs(const MicroBatch& batch) {
  const auto half_square = [](int64_t length) { return 0.5 * static_cast<double>(length) * static_cast<double>(length); };
  if (batch.positions.empty()) return static_cast<double>(batch.batch) * half_square(batch.seq);
  double pairs = 0.0;
  for (int64_t row = 0; row < batch.batch; ++row) {
    const int32_t* positions = batch.positions.data() + row * batch.seq;  // [T]
    int64_t length = 0;  // of the sample being read
    for (int64_t t = 0; t < batch.seq; ++t) {
      if (positions[t] == 0 && length > 0) {  // a sample starts
        pairs += half_square(length);
        length = 0;
      }
      ++length;
    }
    pairs += half_square(length);
  }
  return pairs;
}

}  // namespace zt
