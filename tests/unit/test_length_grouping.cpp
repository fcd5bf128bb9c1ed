// Tests of --group-by-length (data/length_grouping.h): the reordered global batch is a
// permutation of it (same samples, so the same loss), every micro-batch slot holds one chunk of
// the length-sorted list, ties keep list order, padding falls on a skewed batch for W = 1, 2, 4;
// the padding fractions and the nearest-rank percentile against hand-computed values.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "data/length_grouping.h"
#include "test_util.h"

namespace {

// The list positions of (rank, micro) in DistributedSampler step order (see length_grouping.h).
std::vector<size_t> slot_positions(int rank, int64_t micro, int world_size, int64_t micro_batch) {
  std::vector<size_t> positions;
  for (int64_t element = 0; element < micro_batch; ++element)
    positions.push_back(static_cast<size_t>(rank + world_size * (micro * micro_batch + element)));
  return positions;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(length_grouping)

BOOST_AUTO_TEST_CASE(hand_computed_layout) {
  // W=2, micro-batch 2, one micro-step: sorted longest first 101(50) 103(40) | 102(20) 100(10);
  // chunk 0 -> rank 0 (positions 0, 2), chunk 1 -> rank 1 (positions 1, 3).
  const std::vector<int64_t> samples = {100, 101, 102, 103};
  const std::vector<int64_t> lengths = {10, 50, 20, 40};
  BOOST_TEST(zt::group_by_length(samples, lengths, 2, 2) == (std::vector<int64_t>{101, 102, 103, 100}),
             boost::test_tools::per_element());
  // One rank: micro-batch 0 gets the two longest, micro-batch 1 the two shortest.
  BOOST_TEST(zt::group_by_length(samples, lengths, 1, 2) == (std::vector<int64_t>{101, 103, 102, 100}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ties_keep_list_order) {
  // All lengths equal: chunk c holds list positions [c*mb, (c+1)*mb) and goes to rank c % W,
  // micro-batch c / W. W=2, mb=2, two micro-steps (G = 8).
  const std::vector<int64_t> samples = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int64_t> lengths(8, 33);
  // chunk0 {0,1} -> r0 m0 (pos 0,2); chunk1 {2,3} -> r1 m0 (pos 1,3); chunk2 {4,5} -> r0 m1
  // (pos 4,6); chunk3 {6,7} -> r1 m1 (pos 5,7).
  BOOST_TEST(zt::group_by_length(samples, lengths, 2, 2) == (std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(permutation_chunks_and_determinism) {
  std::mt19937 engine(7);
  for (int world_size : {1, 2, 4}) {
    for (int64_t micro_batch : {1, 2, 3}) {
      for (int64_t accumulation : {1, 3}) {
        const int64_t G = world_size * micro_batch * accumulation;
        std::vector<int64_t> samples(static_cast<size_t>(G)), lengths(static_cast<size_t>(G));
        for (int64_t i = 0; i < G; ++i) {
          samples[static_cast<size_t>(i)] = 1000 + 17 * i;                                     // distinct ids
          lengths[static_cast<size_t>(i)] = std::uniform_int_distribution<int64_t>(1, 6)(engine);  // many ties
        }
        const std::vector<int64_t> grouped = zt::group_by_length(samples, lengths, world_size, micro_batch);
        BOOST_TEST_CONTEXT("W=" << world_size << " mb=" << micro_batch << " accumulation=" << accumulation) {
          // The same multiset of samples.
          std::vector<int64_t> sorted_in = samples, sorted_out = grouped;
          std::sort(sorted_in.begin(), sorted_in.end());
          std::sort(sorted_out.begin(), sorted_out.end());
          BOOST_TEST(sorted_in == sorted_out, boost::test_tools::per_element());
          // Deterministic.
          BOOST_TEST(zt::group_by_length(samples, lengths, world_size, micro_batch) == grouped,
                     boost::test_tools::per_element());
          // Slot of chunk c = (rank c % W, micro c / W) holds lengths no longer than chunk c-1's.
          auto length_of = [&](int64_t sample) { return lengths[static_cast<size_t>((sample - 1000) / 17)]; };
          int64_t previous_shortest = INT64_MAX;
          for (int64_t chunk = 0; chunk < G / micro_batch; ++chunk) {
            int64_t longest = 0, shortest = INT64_MAX;
            for (size_t position : slot_positions(static_cast<int>(chunk % world_size), chunk / world_size, world_size,
                                                  micro_batch)) {
              longest = std::max(longest, length_of(grouped[position]));
              shortest = std::min(shortest, length_of(grouped[position]));
            }
            BOOST_TEST(longest <= previous_shortest, "chunk " << chunk);
            previous_shortest = shortest;
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(padding_falls_on_a_skewed_batch) {
  for (int world_size : {1, 2, 4}) {
    const int64_t micro_batch = 2, accumulation = 4;
    const int64_t G = world_size * micro_batch * accumulation;
    // Long and short samples interleaved, so sampler order pairs every long one with a short one.
    std::vector<int64_t> samples, lengths;
    for (int64_t i = 0; i < G; ++i) {
      samples.push_back(i);
      lengths.push_back((i / world_size) % 2 == 0 ? 500 : 10);
    }
    const double before = zt::global_batch_padding_fraction(lengths, world_size, micro_batch);
    const std::vector<int64_t> grouped = zt::group_by_length(samples, lengths, world_size, micro_batch);
    std::vector<int64_t> grouped_lengths;
    for (int64_t sample : grouped) grouped_lengths.push_back(lengths[static_cast<size_t>(sample)]);
    const double after = zt::global_batch_padding_fraction(grouped_lengths, world_size, micro_batch);
    BOOST_TEST_CONTEXT("W=" << world_size) {
      BOOST_TEST(before == 1.0 - 510.0 / 1000.0, boost::test_tools::tolerance(1e-12));  // every micro-batch {500, 10}
      BOOST_TEST(after == 0.0);  // {500, 500} and {10, 10}
    }
  }
}

BOOST_AUTO_TEST_CASE(padding_fraction_values) {
  BOOST_TEST(zt::padding_fraction(std::vector<int64_t>{10, 20}) == 0.25);  // 1 - 30/40
  BOOST_TEST(zt::padding_fraction(std::vector<int64_t>{7}) == 0.0);
  BOOST_TEST(zt::padding_fraction(std::vector<int64_t>{}) == 0.0);
  BOOST_TEST(zt::padding_fraction(std::vector<int64_t>{4, 4, 1, 3}) == 0.25);  // 1 - 12/16
  // Two ranks, mb 2: rank 0 holds positions 0,2 {8, 2} (16 positions, 6 padded), rank 1
  // positions 1,3 {4, 4} (8 positions, none padded): 6 of 24.
  BOOST_TEST(zt::global_batch_padding_fraction(std::vector<int64_t>{8, 4, 2, 4}, 2, 2) == 6.0 / 24.0,
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(nearest_rank_percentiles) {
  std::vector<int64_t> hundred;
  for (int64_t i = 1; i <= 100; ++i) hundred.push_back(i);
  BOOST_TEST(zt::nearest_rank_percentile(hundred, 50) == 50);
  BOOST_TEST(zt::nearest_rank_percentile(hundred, 90) == 90);
  BOOST_TEST(zt::nearest_rank_percentile(hundred, 99) == 99);
  BOOST_TEST(zt::nearest_rank_percentile(hundred, 100) == 100);
  BOOST_TEST(zt::nearest_rank_percentile(std::vector<int64_t>{5, 6, 9}, 50) == 6);  // ceil(1.5) = 2nd
  BOOST_TEST(zt::nearest_rank_percentile(std::vector<int64_t>{5, 6, 9}, 0) == 5);
  BOOST_TEST(zt::nearest_rank_percentile(std::vector<int64_t>{}, 50) == 0);
}

BOOST_AUTO_TEST_CASE(bad_layouts) {
  const std::vector<int64_t> six = {0, 1, 2, 3, 4, 5};
  zt::test::check_error_mentions([&] { zt::group_by_length(six, six, 4, 1); },
                                 {"global batch of 6 samples", "world size 4", "micro-batch 1"});
  zt::test::check_error_mentions([&] { zt::group_by_length(six, std::vector<int64_t>{1, 2}, 1, 1); },
                                 {"6 samples but 2 lengths"});
  zt::test::check_error_mentions([&] { zt::group_by_length(six, six, 0, 1); }, {"world size 0"});
  zt::test::check_error_mentions([&] { zt::global_batch_padding_fraction(six, 1, 4); }, {"not a multiple"});
}

BOOST_AUTO_TEST_SUITE_END()
