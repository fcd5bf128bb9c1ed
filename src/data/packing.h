// `--packing`: the samples of a micro-batch concatenated into rows of at most `capacity`
// tokens instead of one right-padded row each, so a step computes on far fewer padding
// positions. Nothing else changes: a step still takes the same samples in the same epoch order
// (data/step_samples.h), each rank the same ones, and micro-batch m of a rank the same samples
// as without packing: only their layout in rows differs. Inside a row every sample keeps its
// own positions (0, 1, ... from its first token: RoPE and learned positions restart), attention
// stays inside the sample (backend.h "positions within packed rows"), its targets and loss mask
// are the unpacked ones and its row ids (dropout masks) too: the loss and the gradients are
// those of the unpacked micro-batch up to float summation order.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "data/batch.h"
#include "data/token_shards.h"

namespace zt {

// First-fit decreasing: the samples (lengths[i] tokens each, all <= capacity) taken longest
// first (ties in list order), each into the first row that still has room for it, else into a
// new row. Returns the rows, each the list of indices into `lengths` in the order they sit in
// the row. Deterministic.
std::vector<std::vector<size_t>> pack_first_fit_decreasing(std::span<const int64_t> lengths, int64_t capacity);

// The samples packed as above into B rows padded to T = the fullest row's tokens (<= capacity),
// laid out as batch.h says with `positions` filled: each sample's tokens count 0..L-1, the
// padding after a row's last sample 0, 1, ... (a sample of its own that has no targets).
MicroBatch make_packed_micro_batch(const TokenDataset& dataset, std::span<const int64_t> sample_indices, int32_t pad_id,
                                   int64_t capacity);

}  // namespace zt
