// Tests of the data-directory report of `zerotune inspect` (data/inspect_data.h): shard table,
// totals and target tokens against the samples written, attributes, percentiles and histogram,
// the sample with its loss mask marked (token ids, and text with a SentencePiece tokenizer
// trained here), and the errors: --sample out of range, a tokenizer the data was not made with.
#include <boost/test/unit_test.hpp>

#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/inspect_data.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using zt::test::TempDir;

zt::ShardAttributes attributes(const std::string& sha256) {
  zt::ShardAttributes attrs;
  attrs.vocab_size = 300;
  attrs.bos_id = 1;
  attrs.eos_id = 2;
  attrs.pad_id = 0;
  attrs.tokenizer_sha256 = sha256;
  attrs.max_seq_len = 8;
  attrs.split = "train";
  attrs.source = "unit.jsonl";
  return attrs;
}

// Five samples over two shards, lengths 3, 8, 5 | 8, 2; targets (mask[1:]) 2, 3, 1 | 7, 1 = 14.
void write_dataset(const TempDir& dir) {
  const zt::ShardAttributes attrs = attributes(std::string(64, 'e'));
  zt::write_token_shard(dir.file("data/train-00000.h5"),
                        std::vector<zt::TokenSample>{{{1, 10, 2}, {0, 1, 1}},
                                                     {{1, 20, 21, 22, 23, 24, 25, 26}, {0, 0, 0, 0, 0, 1, 1, 1}},
                                                     {{1, 30, 31, 32, 2}, {0, 0, 0, 0, 1}}},
                        attrs);
  zt::write_token_shard(dir.file("data/train-00001.h5"),
                        std::vector<zt::TokenSample>{{{1, 40, 41, 42, 43, 44, 45, 2}, {0, 1, 1, 1, 1, 1, 1, 1}},
                                                     {{1, 50}, {0, 1}}},
                        attrs);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(inspect_data)

BOOST_AUTO_TEST_CASE(recognises_data_directories) {
  TempDir dir;
  fs::create_directories(dir.path / "data");
  fs::create_directories(dir.path / "other");
  BOOST_TEST(!zt::holds_token_shards(dir.file("data")));  // empty
  write_dataset(dir);
  BOOST_TEST(zt::holds_token_shards(dir.file("data")));
  dir.write("other/extra.h5", "");  // an .h5 file without the -NNNNN suffix
  dir.write("other/notes-00001.txt", "");
  BOOST_TEST(!zt::holds_token_shards(dir.file("other")));
  BOOST_TEST(!zt::holds_token_shards(dir.file("data/train-00000.h5")));  // a file, not a directory
  BOOST_TEST(!zt::holds_token_shards(dir.file("missing")));
}

BOOST_AUTO_TEST_CASE(report_numbers) {
  TempDir dir;
  fs::create_directories(dir.path / "data");
  write_dataset(dir);
  zt::DataInspectOptions options;
  options.sample_index = 1;
  options.histogram_bins = 3;
  const nlohmann::ordered_json report = zt::inspect_data_dir(dir.file("data"), options);

  BOOST_REQUIRE(report["shards"].size() == 2u);
  BOOST_TEST(report["shards"][0]["name"] == "train-00000.h5");
  BOOST_TEST(report["shards"][0]["samples"] == 3);
  BOOST_TEST(report["shards"][0]["tokens"] == 16);
  BOOST_TEST(report["shards"][1]["samples"] == 2);
  BOOST_TEST(report["shards"][1]["tokens"] == 10);
  BOOST_TEST(report["shards"][1]["bytes"] == static_cast<int64_t>(fs::file_size(dir.file("data/train-00001.h5"))));
  const auto& totals = report["totals"];
  BOOST_TEST(totals["shards"] == 2);
  BOOST_TEST(totals["samples"] == 5);
  BOOST_TEST(totals["tokens"] == 26);
  BOOST_TEST(totals["target_tokens"] == 14);
  BOOST_TEST(totals["target_fraction"].get<double>() == 14.0 / 26.0, boost::test_tools::tolerance(1e-12));

  const auto& attrs = report["attributes"];
  BOOST_TEST(attrs["format"] == "zerotune-tokens");
  BOOST_TEST(attrs["version"] == 1);
  BOOST_TEST(attrs["vocab_size"] == 300);
  BOOST_TEST(attrs["bos_id"] == 1);
  BOOST_TEST(attrs["eos_id"] == 2);
  BOOST_TEST(attrs["pad_id"] == 0);
  BOOST_TEST(attrs["tokenizer_sha256"] == std::string(64, 'e'));
  BOOST_TEST(attrs["max_seq_len"] == 8);
  BOOST_TEST(attrs["source"] == "unit.jsonl");

  // Sorted lengths 2 3 5 8 8: nearest-rank p50 = 3rd = 5, p90 = p99 = 5th = 8.
  const auto& lengths = report["lengths"];
  BOOST_TEST(lengths["min"] == 2);
  BOOST_TEST(lengths["max"] == 8);
  BOOST_TEST(lengths["p50"] == 5);
  BOOST_TEST(lengths["p90"] == 8);
  BOOST_TEST(lengths["p99"] == 8);
  BOOST_TEST(lengths["mean"].get<double>() == 26.0 / 5.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lengths["at_max_seq_len"] == 2);
  // 3 bins of width 3 over [2, 8]: [2,5) holds 2 and 3, [5,8) holds 5, [8,11) holds 8 and 8.
  const auto& histogram = lengths["histogram"];
  BOOST_REQUIRE(histogram.size() == 3u);
  BOOST_TEST(histogram[0]["from"] == 2);
  BOOST_TEST(histogram[0]["to"] == 5);
  BOOST_TEST(histogram[0]["count"] == 2);
  BOOST_TEST(histogram[1]["count"] == 1);
  BOOST_TEST(histogram[2]["count"] == 2);

  // Sample 1 without a tokenizer: ids, targets inside [[ ]].
  const auto& sample = report["sample"];
  BOOST_TEST(sample["index"] == 1);
  BOOST_TEST(sample["length"] == 8);
  BOOST_TEST(sample["target_tokens"] == 3);
  BOOST_TEST(sample["decoded_with"].is_null());
  BOOST_TEST(sample["marked"] == "1 20 21 22 23 [[ 24 25 26 ]]");

  const std::string text = zt::format_data_report(report);
  for (const char* part : {"train-00000.h5", "total", "target tokens 14 (53.8% of the tokens)", "tokenizer_sha256",
                           "p50 5, p90 8, p99 8, max 8", "1 20 21 22 23 [[ 24 25 26 ]]", "##"})
    BOOST_TEST(text.find(part) != std::string::npos, "'" << part << "' is not in:\n" << text);
}

BOOST_AUTO_TEST_CASE(sample_decoded_with_the_tokenizer) {
  TempDir dir;
  {
    std::ofstream corpus(dir.file("corpus.txt"));
    for (int i = 0; i < 50; ++i)
      corpus << "Human: how do I keep basil fresh " << i << "? Assistant: keep it in a glass of water.\n";
  }
  fs::create_directories(dir.path / "model");
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir.file("corpus.txt") + " --model_prefix=" + dir.file("model/tokenizer") +
      " --vocab_size=300 --model_type=bpe --byte_fallback=true --normalization_rule_name=identity"
      " --remove_extra_whitespaces=false --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --minloglevel=2");
  BOOST_REQUIRE_MESSAGE(status.ok(), status.ToString());
  const auto tokenizer = zt::load_tokenizer(dir.file("model"));

  zt::TokenSample sample;
  sample.tokens.push_back(1);
  for (int32_t id : tokenizer->encode("Human: fresh basil? Assistant:")) sample.tokens.push_back(id);
  const size_t prompt_end = sample.tokens.size();
  for (int32_t id : tokenizer->encode_continuation(" water.")) sample.tokens.push_back(id);
  sample.tokens.push_back(2);
  sample.loss_mask.assign(sample.tokens.size(), 1);
  std::fill(sample.loss_mask.begin(), sample.loss_mask.begin() + static_cast<std::ptrdiff_t>(prompt_end), 0);
  zt::ShardAttributes attrs = attributes(tokenizer->file_sha256());
  attrs.max_seq_len = 64;
  fs::create_directories(dir.path / "data");
  zt::write_token_shard(dir.file("data/train-00000.h5"), std::vector<zt::TokenSample>{sample}, attrs);

  zt::DataInspectOptions options;
  options.tokenizer = dir.file("model");
  const nlohmann::ordered_json report = zt::inspect_data_dir(dir.file("data"), options);
  BOOST_TEST(report["sample"]["decoded_with"] == dir.file("model/tokenizer.model"));
  BOOST_TEST(report["sample"]["marked"] == "<s> Human: fresh basil? Assistant:[[ water.</s>]]");

  // A tokenizer the data was not made with: refused, naming both.
  attrs.tokenizer_sha256 = std::string(64, '0');
  fs::create_directories(dir.path / "other");
  zt::write_token_shard(dir.file("other/train-00000.h5"), std::vector<zt::TokenSample>{sample}, attrs);
  zt::test::check_error_mentions([&] { zt::inspect_data_dir(dir.file("other"), options); },
                                 {dir.file("other"), dir.file("model/tokenizer.model"), std::string(64, '0'),
                                  tokenizer->file_sha256()});
}

BOOST_AUTO_TEST_CASE(sample_out_of_range) {
  TempDir dir;
  fs::create_directories(dir.path / "data");
  write_dataset(dir);
  zt::DataInspectOptions options;
  options.sample_index = 5;
  zt::test::check_error_mentions([&] { zt::inspect_data_dir(dir.file("data"), options); },
                                 {dir.file("data"), "--sample 5 is outside [0, 5)"});
  options.sample_index = -1;
  zt::test::check_error_mentions([&] { zt::inspect_data_dir(dir.file("data"), options); }, {"--sample -1"});
}

BOOST_AUTO_TEST_SUITE_END()
