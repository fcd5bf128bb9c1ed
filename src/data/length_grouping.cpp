// Length grouping of a global batch and padding fractions (see length_grouping.h).
#include "data/length_grouping.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace zt {
namespace {

// The list position of element j of micro-batch m on rank r (DistributedSampler striding).
size_t list_position(int64_t rank, int64_t micro, int64_t element, int world_size, int64_t micro_batch) {
  return static_cast<size_t>(rank + world_size * (micro * micro_batch + element));
}

void check_layout(size_t batch_size, int world_size, int64_t micro_batch, const char* caller) {
  ZT_CHECK(world_size >= 1, caller, ": world size ", world_size, " must be at least 1");
  ZT_CHECK(micro_batch >= 1, caller, ": micro-batch size ", micro_batch, " must be at least 1");
  const int64_t slot_samples = static_cast<int64_t>(world_size) * micro_batch;
  ZT_CHECK(static_cast<int64_t>(batch_size) % slot_samples == 0, caller, ": a global batch of ", batch_size,
           " samples is not a multiple of world size ", world_size, " x micro-batch ", micro_batch, " = ",
           slot_samples);
}

// Tokens and positions (B * longest) of one micro-batch padded to its longest sample.
struct PaddedSize {
  int64_t real = 0;
  int64_t positions = 0;
};
PaddedSize padded_size(std::span<const int64_t> micro_batch_lengths) {
  if (micro_batch_lengths.empty()) return {};
  const int64_t longest = *std::max_element(micro_batch_lengths.begin(), micro_batch_lengths.end());
  return {std::accumulate(micro_batch_lengths.begin(), micro_batch_lengths.end(), int64_t{0}),
          longest * static_cast<int64_t>(micro_batch_lengths.size())};
}

double fraction_padded(const PaddedSize& size) {
  return size.positions > 0 ? 1.0 - static_cast<double>(size.real) / static_cast<double>(size.positions) : 0.0;
}

}  // namespace

std::vector<int64_t> group_by_length(std::span<const int64_t> batch_samples, std::span<const int64_t> lengths,
                                     int world_size, int64_t micro_batch) {
  ZT_CHECK(batch_samples.size() == lengths.size(), "group_by_length: ", batch_samples.size(), " samples but ",
           lengths.size(), " lengths");
  check_layout(batch_samples.size(), world_size, micro_batch, "group_by_length");

  // List positions sorted by length, longest first; stable, so equal lengths keep list order.
  std::vector<size_t> by_length(batch_samples.size());  // [G]
  std::iota(by_length.begin(), by_length.end(), size_t{0});
  std::stable_sort(by_length.begin(), by_length.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });

  // Chunk c = sorted positions [c*mb, (c+1)*mb) fills micro-batch c / W of rank c % W.
  std::vector<int64_t> grouped(batch_samples.size());  // [G]
  const int64_t chunks = static_cast<int64_t>(batch_samples.size()) / micro_batch;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t rank = chunk % world_size, micro = chunk / world_size;
    for (int64_t element = 0; element < micro_batch; ++element) {
      const size_t source = by_length[static_cast<size_t>(chunk * micro_batch + element)];
      grouped[list_position(rank, micro, element, world_size, micro_batch)] = batch_samples[source];
    }
  }
  return grouped;
}

double padding_fraction(std::span<const int64_t> micro_batch_lengths) {
  return fraction_padded(padded_size(micro_batch_lengths));
}

double global_batch_padding_fraction(std::span<const int64_t> lengths, int world_size, int64_t micro_batch) {
  check_layout(lengths.size(), world_size, micro_batch, "global_batch_padding_fraction");
  const int64_t micro_steps = static_cast<int64_t>(lengths.size()) / (world_size * micro_batch);
  PaddedSize total;
  std::vector<int64_t> micro_lengths(static_cast<size_t>(micro_batch));  // [mb] one micro-batch's lengths
  for (int64_t rank = 0; rank < world_size; ++rank) {
    for (int64_t micro = 0; micro < micro_steps; ++micro) {
      for (int64_t element = 0; element < micro_batch; ++element)
        micro_lengths[static_cast<size_t>(element)] = lengths[list_position(rank, micro, element, world_size, micro_batch)];
      const PaddedSize size = padded_size(micro_lengths);
      total.real += size.real;
      total.positions += size.positions;
    }
  }
  return fraction_padded(total);
}

int64_t nearest_rank_percentile(std::span<const int64_t> sorted, int percent) {
  if (sorted.empty()) return 0;
  const size_t rank = (sorted.size() * static_cast<size_t>(percent) + 99) / 100;
  return sorted[std::max<size_t>(rank, 1) - 1];
}

}  // namespace zt
