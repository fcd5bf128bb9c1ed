// DeepSpeed-Chat's seeded row splits (data/row_split.h).
#include "data/row_split.h"

#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "core/error.h"

namespace zt {

namespace {

// A uniform integer in [0, max] as numpy's legacy random_interval draws it: 32-bit outputs of
// the generator, masked to the smallest 2^k - 1 >= max, drawn again while above max.
uint64_t numpy_random_interval(std::mt19937& generator, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  ZT_CHECK(max <= 0xffffffffULL, "numpy_random_interval: ", max, " rows and more are not supported");
  uint64_t value = 0;
  do {
    value = static_cast<uint64_t>(generator()) & mask;
  } while (value > max);
  return value;
}

}  // namespace

std::vector<int64_t> numpy_shuffled_rows(int64_t rows, uint32_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(rows));  // [rows]
  std::iota(order.begin(), order.end(), int64_t{0});
  // std::mt19937(seed) is MT19937's init_genrand(seed), which numpy's RandomState(int) uses.
  std::mt19937 generator(seed);
  for (int64_t i = rows - 1; i >= 1; --i) {
    const uint64_t j = numpy_random_interval(generator, static_cast<uint64_t>(i));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> split_boundaries(int64_t rows, const std::vector<double>& weights) {
  ZT_CHECK(!weights.empty(), "a split needs at least one weight");
  double total = 0.0;
  for (double weight : weights) {
    ZT_CHECK(weight >= 0.0 && std::isfinite(weight), "split weight ", weight, ": must be a finite number >= 0");
    total += weight;
  }
  ZT_CHECK(total > 0.0, "split weights: at least one must be above 0");
  std::vector<int64_t> boundaries{0};  // [weights + 1]
  for (double weight : weights)  // nearbyint rounds half to even (the default rounding mode), as Python's round
    boundaries.push_back(boundaries.back() + static_cast<int64_t>(std::nearbyint(weight / total * static_cast<double>(rows))));
  const int64_t excess = boundaries.back() - rows;
  for (size_t k = 1; k < boundaries.size(); ++k) boundaries[k] -= excess;
  return boundaries;
}

std::vector<int64_t> deepspeed_chat_portion(int64_t rows, const std::vector<double>& weights, size_t portion,
                                            uint32_t seed) {
  const std::vector<int64_t> boundaries = split_boundaries(rows, weights);
  ZT_CHECK(portion + 1 < boundaries.size(), "split portion ", portion + 1, " of ", weights.size(), ": no such portion");
  const std::vector<int64_t> order = numpy_shuffled_rows(rows, seed);
  return std::vector<int64_t>(order.begin() + boundaries[portion], order.begin() + boundaries[portion + 1]);
}

std::vector<RowRole> deepspeed_chat_row_roles(int64_t rows, double held_out_fraction,
                                              const std::vector<double>& data_split, size_t phase, uint32_t seed) {
  std::vector<int64_t> kept, held_out;  // row indices, in DeepSpeed-Chat's order
  if (held_out_fraction > 0.0) {
    const std::vector<double> train_eval = {1.0 - held_out_fraction, held_out_fraction};
    kept = deepspeed_chat_portion(rows, train_eval, 0, seed);
    held_out = deepspeed_chat_portion(rows, train_eval, 1, seed);
  } else {
    kept.resize(static_cast<size_t>(rows));
    std::iota(kept.begin(), kept.end(), int64_t{0});
  }
  // --data_split: this phase's portion of each part (positions into the part).
  auto narrow = [&](std::vector<int64_t>& part) {
    if (data_split.empty()) return;
    std::vector<int64_t> narrowed;
    for (int64_t position : deepspeed_chat_portion(static_cast<int64_t>(part.size()), data_split, phase, seed))
      narrowed.push_back(part[static_cast<size_t>(position)]);
    part = std::move(narrowed);
  };
  narrow(kept);
  narrow(held_out);
  std::vector<RowRole> roles(static_cast<size_t>(rows), RowRole::Unused);  // [rows]
  for (int64_t row : kept) roles[static_cast<size_t>(row)] = RowRole::Kept;
  for (int64_t row : held_out) roles[static_cast<size_t>(row)] = RowRole::HeldOut;
  return roles;
}

}  // namespace zt
