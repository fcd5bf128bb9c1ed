// Tests of micro-batch building (data/batch.h): padding to the longest sample, next-token
// targets, the loss mask shifted by one, row ids, token counts, and bad arguments.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/batch.h"
#include "data/token_shards.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it at the end.
using zt::test::TempDir;

// Three samples in two shards (so a batch reads across shards):
//   0: 1 10 11 12 2         mask 0 0 1 1 1
//   1: 1 20 2               mask 0 1 1
//   2: 1 30 31 32 33 34 2   mask 0 0 0 1 0 1 1
//   3: 7                    mask 0           (a single token: nothing to predict)
zt::TokenDataset write_dataset(const TempDir& dir) {
  zt::ShardAttributes attrs;
  attrs.vocab_size = 64;
  attrs.bos_id = 1;
  attrs.eos_id = 2;
  attrs.pad_id = 0;
  attrs.tokenizer_sha256 = std::string(64, '0');
  attrs.max_seq_len = 16;
  const std::vector<zt::TokenSample> first = {{{1, 10, 11, 12, 2}, {0, 0, 1, 1, 1}}, {{1, 20, 2}, {0, 1, 1}}};
  const std::vector<zt::TokenSample> second = {{{1, 30, 31, 32, 33, 34, 2}, {0, 0, 0, 1, 0, 1, 1}}, {{7}, {0}}};
  zt::write_token_shard((dir.path / "train-00000.h5").string(), first, attrs);
  zt::write_token_shard((dir.path / "train-00001.h5").string(), second, attrs);
  return zt::TokenDataset::open(dir.path.string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch)

BOOST_AUTO_TEST_CASE(pads_to_the_longest_sample_with_shifted_targets) {
  TempDir dir;
  const zt::TokenDataset dataset = write_dataset(dir);
  const std::vector<int64_t> indices = {2, 0};
  const zt::MicroBatch batch = zt::make_micro_batch(dataset, indices, 5);
  BOOST_TEST(batch.batch == 2);
  BOOST_TEST(batch.seq == 7);
  BOOST_TEST(batch.sample_indices == indices, boost::test_tools::per_element());
  // [2, 7]
  BOOST_TEST(batch.input_ids == (std::vector<int32_t>{1, 30, 31, 32, 33, 34, 2,  //
                                                      1, 10, 11, 12, 2, 5, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(batch.targets == (std::vector<int32_t>{30, 31, 32, 33, 34, 2, 5,  //
                                                    10, 11, 12, 2, 5, 5, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(batch.loss_mask == (std::vector<uint8_t>{0, 0, 1, 0, 1, 1, 0,  //
                                                      0, 1, 1, 1, 0, 0, 0}),
             boost::test_tools::per_element());
  std::vector<int64_t> row_ids;
  for (int64_t t = 0; t < 7; ++t) row_ids.push_back(2 * zt::kRowIdStride + t);
  for (int64_t t = 0; t < 7; ++t) row_ids.push_back(t);
  BOOST_TEST(batch.row_ids == row_ids, boost::test_tools::per_element());
  BOOST_TEST(batch.target_tokens == 6);
  BOOST_TEST(batch.real_tokens == 12);
}

BOOST_AUTO_TEST_CASE(target_counts_add_up_over_any_split) {
  TempDir dir;
  const zt::TokenDataset dataset = write_dataset(dir);
  const std::vector<int64_t> all = {0, 1, 2, 3};
  BOOST_TEST(zt::count_target_tokens(dataset, all) == 3 + 2 + 3 + 0);
  BOOST_TEST(zt::make_micro_batch(dataset, all, 0).target_tokens == 8);
  int64_t sum_over_single_samples = 0;
  for (const int64_t index : all) {
    const std::vector<int64_t> one = {index};
    const zt::MicroBatch batch = zt::make_micro_batch(dataset, one, 0);
    BOOST_TEST(batch.seq == dataset.sample_length(index));
    BOOST_TEST(batch.target_tokens == zt::count_target_tokens(dataset, one));
    sum_over_single_samples += batch.target_tokens;
  }
  BOOST_TEST(sum_over_single_samples == 8);
  // A one-token sample: one position, padded target, nothing to predict.
  const std::vector<int64_t> single_token = {3};
  const zt::MicroBatch lone = zt::make_micro_batch(dataset, single_token, 0);
  BOOST_TEST(lone.input_ids == std::vector<int32_t>{7});
  BOOST_TEST(lone.targets == std::vector<int32_t>{0});
  BOOST_TEST(lone.loss_mask == std::vector<uint8_t>{0});
  BOOST_TEST(lone.real_tokens == 1);
}

BOOST_AUTO_TEST_CASE(bad_arguments) {
  TempDir dir;
  const zt::TokenDataset dataset = write_dataset(dir);
  const std::vector<int64_t> none;
  BOOST_CHECK_THROW(zt::make_micro_batch(dataset, none, 0), zt::Error);
  const std::vector<int64_t> out_of_range = {0, 4};
  BOOST_CHECK_THROW(zt::make_micro_batch(dataset, out_of_range, 0), zt::Error);
  BOOST_CHECK_THROW(zt::count_target_tokens(dataset, out_of_range), zt::Error);
  const std::vector<int64_t> valid = {0};
  BOOST_CHECK_THROW(zt::make_micro_batch(dataset, valid, 64), zt::Error);
  BOOST_CHECK_THROW(zt::make_micro_batch(dataset, valid, -1), zt::Error);
}

BOOST_AUTO_TEST_SUITE_END()
