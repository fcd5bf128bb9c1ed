// Packed micro-batches (see packing.h).
#include "data/packing.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace zt {

std::vector<std::vector<size_t>> pack_first_fit_decreasing(std::span<const int64_t> lengths, int64_t capacity) {
  ZT_CHECK(capacity > 0, "packing: the row capacity must be positive, not ", capacity);
  std::vector<size_t> by_length(lengths.size());  // [S] indices, longest first
  std::iota(by_length.begin(), by_length.end(), size_t{0});
  std::stable_sort(by_length.begin(), by_length.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<size_t>> rows;
  std::vector<int64_t> room;  // [rows] free tokens of each row
  for (size_t sample : by_length) {
    const int64_t length = lengths[sample];
    ZT_CHECK(length >= 1 && length <= capacity, "packing: sample ", sample, " has ", length,
             " tokens, which does not fit a row of ", capacity);
    size_t row = 0;
    while (row < rows.size() && room[row] < length) ++row;
    if (row == rows.size()) {
      rows.emplace_back();
      room.push_back(capacity);
    }
    rows[row].push_back(sample);
    room[row] -= length;
  }
  return rows;
}

MicroBatch make_packed_micro_batch(const TokenDataset& dataset, std::span<const int64_t> sample_indices, int32_t pad_id,
                                   int64_t capacity) {
  ZT_CHECK(!sample_indices.empty(), "make_packed_micro_batch: no samples given");
  std::vector<int64_t> lengths;  // [S]
  for (int64_t index : sample_indices) lengths.push_back(dataset.sample_length(index));
  check_batch_inputs(dataset, pad_id, *std::max_element(lengths.begin(), lengths.end()), "make_packed_micro_batch");
  const std::vector<std::vector<size_t>> rows = pack_first_fit_decreasing(lengths, capacity);

  int64_t seq = 0;  // T: the fullest row
  for (const std::vector<size_t>& row : rows) {
    int64_t used = 0;
    for (size_t sample : row) used += lengths[sample];
    seq = std::max(seq, used);
  }
  MicroBatch batch = padded_micro_batch(static_cast<int64_t>(rows.size()), seq, pad_id);
  batch.positions.assign(batch.input_ids.size(), 0);
  const size_t T = static_cast<size_t>(seq);
  for (size_t b = 0; b < rows.size(); ++b) {
    size_t offset = b * T;
    int64_t last_sample = 0;
    for (size_t sample : rows[b]) {
      const int64_t index = sample_indices[sample];
      place_sample(batch, dataset.read_sample(index), index, offset);
      for (int64_t t = 0; t < lengths[sample]; ++t) batch.positions[offset + static_cast<size_t>(t)] = static_cast<int32_t>(t);
      offset += static_cast<size_t>(lengths[sample]);
      batch.sample_indices.push_back(index);
      last_sample = index;
    }
    // Padding: positions from 0 (its own segment: no real token attends to it); row ids
    // continue the row's last sample as an unpacked row's padding would.
    const int64_t last_length = dataset.sample_length(last_sample);
    for (size_t e = offset, k = 0; e < (b + 1) * T; ++e, ++k) {
      batch.positions[e] = static_cast<int32_t>(k);
      batch.row_ids[e] = last_sample * kRowIdStride + last_length + static_cast<int64_t>(k);
    }
  }
  return batch;
}

}  // namespace zt
