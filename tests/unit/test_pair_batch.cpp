// Tests of preference pairs (data/token_shards.h record="pair", data/pair_batch.h): the pair shard
// round trip, a pair as one sample (lengths, the sampler's count), the pair micro-batch layout
// (chosen rows then rejected rows, padding, score ends, divergences, each row's targets and loss
// mask), the loss span of
// DeepSpeed-Chat's RewardModel (first divergence to the longer side's end; an identical pair
// [end - 1, end)), and the refusals (samples vs pairs, bad pairs).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/pair_batch.h"
#include "data/token_shards.h"
#include "test_util.h"

namespace {

using zt::test::TempDir;

zt::ShardAttributes attributes() {
  zt::ShardAttributes attrs;
  attrs.vocab_size = 64;
  attrs.bos_id = 1;
  attrs.eos_id = 2;
  attrs.pad_id = 0;
  attrs.tokenizer_sha256 = std::string(64, '0');
  attrs.max_seq_len = 8;
  return attrs;
}

// Four pairs (prompt | chosen response | rejected response; scored tokens: mask 1, the EOS 2 not):
//   0: 1 10 | 20 21 2  | 20 22 2     differ at position 3 (21 vs 22)
//   1: 1 10 | 30 2     | 30 31 32 2  differ at position 3 (EOS vs 31)
//   2: 1 11 | 40 41    | 40 41       identical
//   3: 1    | 50       | 51 52 53 54 55 56 57   differ at 1; rejected fills max_seq_len (no EOS)
std::vector<zt::TokenPair> pairs() {
  return {{{1, 10}, {{20, 21, 2}, {1, 1, 0}}, {{20, 22, 2}, {1, 1, 0}}},
          {{1, 10}, {{30, 2}, {1, 0}}, {{30, 31, 32, 2}, {1, 1, 1, 0}}},
          {{1, 11}, {{40, 41}, {1, 1}}, {{40, 41}, {1, 1}}},
          {{1}, {{50}, {1}}, {{51, 52, 53, 54, 55, 56, 57}, {1, 1, 1, 1, 1, 1, 1}}}};
}

zt::TokenDataset write_pairs(const TempDir& dir) {
  const std::vector<zt::TokenPair> all = pairs();
  zt::write_pair_shard(dir.file("train-00000.h5"), std::vector<zt::TokenPair>(all.begin(), all.begin() + 2), attributes());
  zt::write_pair_shard(dir.file("train-00001.h5"), std::vector<zt::TokenPair>(all.begin() + 2, all.end()), attributes());
  return zt::TokenDataset::open(dir.path.string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pair_batch)

BOOST_AUTO_TEST_CASE(pair_shards_round_trip_and_count_pairs) {
  TempDir dir;
  const zt::TokenDataset dataset = write_pairs(dir);
  BOOST_TEST(dataset.holds_pairs());
  BOOST_TEST(dataset.num_samples() == 4);  // the sampler deals out pairs
  BOOST_TEST(dataset.sample_length(1) == 6);  // the longer side: 2 + 4
  BOOST_TEST(dataset.longest_sample() == 8);
  const std::vector<zt::TokenPair> expected = pairs();
  for (int64_t i = 0; i < 4; ++i) {
    const zt::TokenPair pair = dataset.read_pair(i);
    BOOST_TEST(pair.prompt == expected[static_cast<size_t>(i)].prompt);
    BOOST_TEST(pair.chosen.tokens == expected[static_cast<size_t>(i)].chosen.tokens);
    BOOST_TEST(pair.rejected.loss_mask == expected[static_cast<size_t>(i)].rejected.loss_mask);
  }
  const zt::TokenSample rejected = dataset.read_pair(1).rejected_sequence();
  BOOST_TEST(rejected.tokens == (std::vector<int32_t>{1, 10, 30, 31, 32, 2}));
  BOOST_TEST(rejected.loss_mask == (std::vector<uint8_t>{0, 0, 1, 1, 1, 0}));
}

BOOST_AUTO_TEST_CASE(micro_batch_puts_chosen_rows_first_with_score_ends_and_divergences) {
  TempDir dir;
  const zt::TokenDataset dataset = write_pairs(dir);
  const std::vector<int64_t> indices = {1, 0};
  const zt::MicroBatch batch = zt::make_pair_micro_batch(dataset, indices, 0);
  BOOST_TEST(batch.pairs == 2);
  BOOST_TEST(batch.batch == 4);
  BOOST_TEST(batch.seq == 6);
  BOOST_TEST(batch.target_tokens == 2);  // the loss averages over pairs
  BOOST_TEST(batch.real_tokens == 4 + 6 + 5 + 5);
  const std::vector<int32_t> row1(batch.input_ids.begin() + 6, batch.input_ids.begin() + 12);  // pair 0, chosen
  BOOST_TEST(row1 == (std::vector<int32_t>{1, 10, 20, 21, 2, 0}));
  const std::vector<int32_t> row2(batch.input_ids.begin() + 12, batch.input_ids.begin() + 18);  // pair 1, rejected
  BOOST_TEST(row2 == (std::vector<int32_t>{1, 10, 30, 31, 32, 2}));
  // Each row's own targets and loss mask (DPO sums log-probs over them): the scored response
  // tokens as targets of the position before them; the EOS after them is not one.
  const std::vector<int32_t> targets1(batch.targets.begin() + 6, batch.targets.begin() + 12);
  BOOST_TEST(targets1 == (std::vector<int32_t>{10, 20, 21, 2, 0, 0}));
  const std::vector<uint8_t> mask1(batch.loss_mask.begin() + 6, batch.loss_mask.begin() + 12);
  BOOST_TEST(mask1 == (std::vector<uint8_t>{0, 1, 1, 0, 0, 0}));
  BOOST_TEST(batch.score_ends == (std::vector<int64_t>{3, 4, 5, 4}));
  BOOST_TEST(batch.divergences == (std::vector<int64_t>{3, 3}));
  // Dropout keys: pair i's chosen row is 2i, its rejected row 2i + 1.
  BOOST_TEST(batch.row_ids[0] == 2 * zt::kRowIdStride);
  BOOST_TEST(batch.row_ids[2 * 6 + 1] == 3 * zt::kRowIdStride + 1);
}

BOOST_AUTO_TEST_CASE(loss_span_runs_from_the_divergence_to_the_longer_end) {
  TempDir dir;
  const zt::TokenDataset dataset = write_pairs(dir);
  const std::vector<int64_t> indices = {0, 1, 2, 3};
  const zt::MicroBatch batch = zt::make_pair_micro_batch(dataset, indices, 0);
  BOOST_TEST(batch.score_ends == (std::vector<int64_t>{4, 3, 4, 2, 4, 5, 4, 8}));
  const auto span = [&](int64_t pair) {
    const zt::PairSpan s = zt::pair_loss_span(batch, pair);
    return std::vector<int64_t>{s.begin, s.end};
  };
  BOOST_TEST(span(0) == (std::vector<int64_t>{3, 4}));
  BOOST_TEST(span(1) == (std::vector<int64_t>{3, 5}));  // the chosen side's EOS and padding count
  BOOST_TEST(span(2) == (std::vector<int64_t>{3, 4}));  // identical: [end - 1, end), loss log 2
  BOOST_TEST(span(3) == (std::vector<int64_t>{1, 8}));
}

BOOST_AUTO_TEST_CASE(samples_and_pairs_are_not_mixed_up) {
  TempDir dir;
  const zt::TokenDataset dataset = write_pairs(dir);
  zt::test::check_error([&] { dataset.read_sample(0); }, "holds preference pairs");
  TempDir samples_dir;
  zt::write_token_shard(samples_dir.file("train-00000.h5"), std::vector<zt::TokenSample>{{{1, 5, 2}, {0, 1, 1}}},
                        attributes());
  const zt::TokenDataset samples = zt::TokenDataset::open(samples_dir.path.string());
  BOOST_TEST(!samples.holds_pairs());
  zt::test::check_error([&] { samples.read_pair(0); }, "not preference pairs");
  // One directory holding both kinds is refused when opened.
  zt::write_pair_shard(samples_dir.file("train-00001.h5"), pairs(), attributes());
  zt::test::check_error([&] { zt::TokenDataset::open(samples_dir.path.string()); }, "disagree on what they hold");
}

BOOST_AUTO_TEST_CASE(bad_pairs_are_refused_when_written) {
  TempDir dir;
  const std::vector<zt::TokenPair> too_long = {{{1, 2, 3, 4, 5}, {{6, 7, 8, 9}, {1, 1, 1, 1}}, {{6}, {1}}}};
  zt::test::check_error_mentions([&] { zt::write_pair_shard(dir.file("a.h5"), too_long, attributes()); },
                                 {"pair 0", "chosen", "more than max_seq_len=8"});
  const std::vector<zt::TokenPair> unscored = {{{1, 2}, {{6, 2}, {0, 0}}, {{6}, {1}}}};
  zt::test::check_error_mentions([&] { zt::write_pair_shard(dir.file("b.h5"), unscored, attributes()); },
                                 {"pair 0", "chosen", "no scored token"});
}

BOOST_AUTO_TEST_SUITE_END()
