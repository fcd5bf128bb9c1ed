// Tests of `zerotune prep` (data/prep.h, data/tokenizer.h, data/jsonl_reader.h) with a tiny
// SentencePiece BPE model trained here (LLaMA's layout: unk 0, bos 1, eos 2, byte fallback,
// identity normalizer, dummy prefix): sample and mask layout, truncation, --loss-on all, exact
// prompt/response boundaries, deterministic shard bytes, JSON-array input, the pad-id lookup,
// every bad input's error with FILE:LINE, --skip-bad-rows counts, and refusing/replacing output.
#include <boost/test/unit_test.hpp>

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sha256.h"
#include "data/jsonl_reader.h"
#include "data/prep.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using zt::test::TempDir;

const std::string kSamplePath = std::string(ZT_SOURCE_DIR) + "/data/rm-static-sample.jsonl";
constexpr int64_t kSampleRows = 300;  // rows of the sample (written by scripts/make_sample_data.py)

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A model directory with tokenizer.model trained once per process on the sample's texts.
const TempDir& tokenizer_dir() {
  static const TempDir dir;
  static const bool trained = [] {
    std::ofstream corpus(dir.file("corpus.txt"));
    zt::JsonRowReader reader(kSamplePath);
    zt::JsonRow row;
    while (reader.next(row))
      corpus << row.object["prompt"].get<std::string>() << row.object["chosen"].get<std::string>() << "\n"
             << row.object["rejected"].get<std::string>() << "\n";
    corpus.close();
    fs::create_directories(dir.path / "model");  // model/tokenizer.model (+ tokenizer.vocab)
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + dir.file("corpus.txt") + " --model_prefix=" + dir.file("model/tokenizer") +
        " --vocab_size=400 --model_type=bpe --byte_fallback=true --split_digits=true"
        " --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=true"
        " --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --minloglevel=2");
    BOOST_REQUIRE_MESSAGE(status.ok(), "SentencePiece training failed: " << status.ToString());
    return true;
  }();
  (void)trained;
  return dir;
}

std::string model_dir() { return tokenizer_dir().file("model"); }

zt::PrepOptions options_for(const std::string& input, const std::string& out_dir) {
  zt::PrepOptions options;
  options.inputs = {input};
  options.tokenizer = model_dir();
  options.out_dir = out_dir;
  return options;
}

std::string jsonl_row(const std::string& prompt, const std::string& chosen) {
  nlohmann::json row = {{"prompt", prompt}, {"chosen", chosen}};
  return row.dump() + "\n";
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(prep)

BOOST_AUTO_TEST_CASE(tokenizer_basics) {
  const auto tokenizer = zt::load_tokenizer(model_dir());
  BOOST_TEST(tokenizer->vocab_size() == 400);
  BOOST_TEST(tokenizer->bos_id() == 1);
  BOOST_TEST(tokenizer->eos_id() == 2);
  BOOST_TEST(tokenizer->pad_id() == 0);  // no json files, no pad piece: the unk id, as HF LLaMA configs
  BOOST_TEST(tokenizer->file_sha256() == zt::sha256_file_hex(model_dir() + "/tokenizer.model"));
  // A path to the .model file works as well as the directory.
  BOOST_TEST(zt::load_tokenizer(model_dir() + "/tokenizer.model")->file_sha256() == tokenizer->file_sha256());
  // The dummy prefix: a text start gets "▁", a continuation does not; bytes come back exactly.
  BOOST_TEST(tokenizer->pieces_text(tokenizer->encode("Sure")) == " Sure");
  BOOST_TEST(tokenizer->pieces_text(tokenizer->encode_continuation("Sure")) == "Sure");
  BOOST_TEST(tokenizer->pieces_text(tokenizer->encode_continuation(" Sure, 144 🚆\n")) == " Sure, 144 🚆\n");
  BOOST_TEST(tokenizer->encode_continuation("").empty());
}

// Where the boundary falls before a space (rm-static: chosen starts with one), the separate
// encodings are exactly the encoding of the joined text; where the tokenizer would merge across
// it, the sample still splits at the boundary and keeps every byte.
BOOST_AUTO_TEST_CASE(boundary_exactness) {
  const auto tokenizer = zt::load_tokenizer(model_dir());
  zt::JsonRowReader reader(kSamplePath);
  zt::JsonRow row;
  int rows = 0;
  while (reader.next(row)) {
    const std::string prompt = row.object["prompt"], chosen = row.object["chosen"];
    BOOST_TEST(concat({tokenizer->encode(prompt), tokenizer->encode_continuation(chosen)}) == tokenizer->encode(prompt + chosen),
               "row at line " << row.line);
    ++rows;
  }
  BOOST_TEST(rows == kSampleRows);
  // "Assistant:" + "Sure" without a space: the joined text may merge ":S"; the sample must not.
  const std::string prompt = "\n\nHuman: Hi\n\nAssistant:", response = "Sure";
  bool truncated = true;
  const zt::TokenSample sample = zt::build_prep_sample(*tokenizer, prompt, response, 512, false, truncated);
  const std::vector<int32_t> prompt_ids = tokenizer->encode(prompt);
  const std::vector<int32_t> response_ids = tokenizer->encode_continuation(response);
  BOOST_TEST(sample.tokens == concat({{1}, prompt_ids, response_ids, {2}}));
  BOOST_TEST(tokenizer->pieces_text(response_ids) == "Sure");
  BOOST_TEST(tokenizer->pieces_text(prompt_ids) == " " + prompt);
  // --eot-token: the text is encoded together with the response and replaces the EOS id.
  const zt::TokenSample eot = zt::build_prep_sample(*tokenizer, prompt, " Hi.", 512, false, truncated, "<|endoftext|>");
  const std::vector<int32_t> eot_ids = tokenizer->encode_continuation(" Hi.<|endoftext|>");
  BOOST_TEST(eot.tokens == concat({{1}, prompt_ids, eot_ids}));
  BOOST_TEST(tokenizer->pieces_text(eot_ids) == " Hi.<|endoftext|>");
  BOOST_TEST(std::count(eot.loss_mask.begin(), eot.loss_mask.end(), 1) == static_cast<long>(eot_ids.size()));
}

BOOST_AUTO_TEST_CASE(mask_layout_truncation_and_loss_on_all) {
  const auto tokenizer = zt::load_tokenizer(model_dir());
  const std::string prompt = "\n\nHuman: Why is the sky blue?\n\nAssistant:";
  const std::string response = " Sunlight is scattered by the air.";
  const size_t prompt_length = tokenizer->encode(prompt).size();
  const size_t response_length = tokenizer->encode_continuation(response).size();
  BOOST_REQUIRE(prompt_length > 3 && response_length > 3);

  bool truncated = true;
  zt::TokenSample sample = zt::build_prep_sample(*tokenizer, prompt, response, 512, false, truncated);
  BOOST_TEST(!truncated);
  BOOST_REQUIRE(sample.tokens.size() == 1 + prompt_length + response_length + 1);
  BOOST_TEST(sample.tokens.front() == 1);
  BOOST_TEST(sample.tokens.back() == 2);
  std::vector<uint8_t> expected(1 + prompt_length, 0);
  expected.resize(sample.tokens.size(), 1);  // response and EOS
  BOOST_TEST(sample.loss_mask == expected);

  // Cut inside the response: the first max_seq_len tokens, no EOS, mask cut the same way.
  const int64_t max_len = static_cast<int64_t>(1 + prompt_length + 2);
  zt::TokenSample cut = zt::build_prep_sample(*tokenizer, prompt, response, max_len, false, truncated);
  BOOST_TEST(truncated);
  BOOST_TEST(cut.tokens == std::vector<int32_t>(sample.tokens.begin(), sample.tokens.begin() + max_len));
  BOOST_TEST(cut.loss_mask == std::vector<uint8_t>(expected.begin(), expected.begin() + max_len));

  zt::TokenSample all = zt::build_prep_sample(*tokenizer, prompt, response, 512, true, truncated);
  BOOST_TEST(all.tokens == sample.tokens);
  std::vector<uint8_t> all_expected(sample.tokens.size(), 1);
  all_expected[0] = 0;  // BOS is never a target
  BOOST_TEST(all.loss_mask == all_expected);
}

BOOST_AUTO_TEST_CASE(shards_attributes_and_determinism) {
  TempDir dir;
  zt::PrepOptions options = options_for(kSamplePath, dir.file("data"));
  options.shard_samples = 110;
  const zt::PrepSummary summary = zt::run_prep(options);
  BOOST_TEST(summary.rows_read == kSampleRows);
  BOOST_TEST(summary.samples_written == kSampleRows);
  BOOST_TEST(summary.skipped.empty());
  BOOST_REQUIRE(summary.shard_paths.size() == 3u);  // 110 + 110 + 80
  BOOST_TEST(fs::path(summary.shard_paths[2]).filename() == "train-00002.h5");
  // Nothing but the shards is left in the output directory (no staging directory).
  BOOST_TEST(std::distance(fs::directory_iterator(dir.path / "data"), fs::directory_iterator()) == 3);

  const auto tokenizer = zt::load_tokenizer(model_dir());
  zt::TokenDataset dataset = zt::TokenDataset::open(dir.file("data"));
  BOOST_REQUIRE(dataset.num_samples() == kSampleRows);
  const zt::ShardAttributes& attrs = dataset.attributes();
  BOOST_TEST(attrs.vocab_size == 400);
  BOOST_TEST(attrs.bos_id == 1);
  BOOST_TEST(attrs.eos_id == 2);
  BOOST_TEST(attrs.pad_id == 0);
  BOOST_TEST(attrs.tokenizer_sha256 == zt::sha256_file_hex(model_dir() + "/tokenizer.model"));
  BOOST_TEST(attrs.max_seq_len == 512);
  BOOST_TEST(attrs.split == "train");
  BOOST_TEST(attrs.source == "rm-static-sample.jsonl");

  int64_t tokens = 0, targets = 0;
  zt::JsonRowReader reader(kSamplePath);
  zt::JsonRow row;
  for (int64_t index = 0; reader.next(row); ++index) {
    bool truncated = false;
    const zt::TokenSample expected = zt::build_prep_sample(*tokenizer, row.object["prompt"].get<std::string>(),
                                                           row.object["chosen"].get<std::string>(), 512, false, truncated);
    const zt::TokenSample got = dataset.read_sample(index);
    BOOST_TEST(got.tokens == expected.tokens, "sample " << index);
    BOOST_TEST(got.loss_mask == expected.loss_mask, "sample " << index);
    tokens += static_cast<int64_t>(got.tokens.size());
    for (uint8_t target : got.loss_mask) targets += target;
  }
  BOOST_TEST(summary.tokens == tokens);
  BOOST_TEST(summary.target_tokens == targets);
  BOOST_TEST(summary.length_max == dataset.longest_sample());
  BOOST_TEST(summary.length_p50 <= summary.length_p90);
  BOOST_TEST(summary.length_p90 <= summary.length_p99);
  const std::string text = zt::format_prep_summary(summary, options);
  BOOST_TEST(text.find("rows read         300\n") != std::string::npos, text);

  // The same input from another directory: the same bytes in every shard.
  options.out_dir = dir.file("again");
  zt::run_prep(options);
  for (const char* name : {"train-00000.h5", "train-00001.h5", "train-00002.h5"})
    BOOST_TEST((read_file(dir.path / "data" / name) == read_file(dir.path / "again" / name)), name);
}

BOOST_AUTO_TEST_CASE(json_array_input_and_columns) {
  TempDir dir;
  // The same two rows as JSONL and as a pretty-printed JSON array: the same samples.
  const nlohmann::json rows = nlohmann::json::array(
      {{{"prompt", "\n\nHuman: Hi\n\nAssistant:"}, {"chosen", " Hello!"}, {"rejected", " Go away."}},
       {{"prompt", "\n\nHuman: 12 x 12?\n\nAssistant:"}, {"chosen", " 144."}, {"rejected", " 122."}}});
  const std::string array_path = dir.write("rows.json", rows.dump(2));
  const std::string jsonl_path = dir.write("rows.jsonl", rows[0].dump() + "\n\n" + rows[1].dump() + "\n");
  zt::run_prep(options_for(array_path, dir.file("from_array")));
  zt::run_prep(options_for(jsonl_path, dir.file("from_jsonl")));
  BOOST_TEST(read_file(dir.path / "from_array" / "train-00000.h5").size() > 0u);
  zt::TokenDataset from_array = zt::TokenDataset::open(dir.file("from_array"));
  zt::TokenDataset from_jsonl = zt::TokenDataset::open(dir.file("from_jsonl"));
  BOOST_REQUIRE(from_array.num_samples() == 2);
  BOOST_REQUIRE(from_jsonl.num_samples() == 2);
  for (int64_t i = 0; i < 2; ++i) BOOST_TEST(from_array.read_sample(i).tokens == from_jsonl.read_sample(i).tokens);

  // --response-column rejected, several inputs, another split name.
  zt::PrepOptions options = options_for(array_path, dir.file("rejected"));
  options.inputs.push_back(jsonl_path);
  options.response_column = "rejected";
  options.split = "test";
  zt::run_prep(options);
  zt::TokenDataset rejected = zt::TokenDataset::open(dir.file("rejected"), "test");
  BOOST_TEST(rejected.num_samples() == 4);
  BOOST_TEST(rejected.attributes().source == "rows.json,rows.jsonl");
  const auto tokenizer = zt::load_tokenizer(model_dir());
  BOOST_TEST(tokenizer->pieces_text(rejected.read_sample(3).tokens).find(" 122.") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(pad_id_from_model_files) {
  TempDir dir;
  fs::copy_file(model_dir() + "/tokenizer.model", dir.file("tokenizer.model"));
  dir.write("special_tokens_map.json", R"({"pad_token": {"content": "</s>", "lstrip": false}})");
  BOOST_TEST(zt::load_tokenizer(dir.path.string())->pad_id() == 2);
  dir.write("tokenizer_config.json", R"({"pad_token": "<s>"})");
  BOOST_TEST(zt::load_tokenizer(dir.path.string())->pad_id() == 1);
  dir.write("config.json", R"({"pad_token_id": null})");  // null: not set, the next source decides
  BOOST_TEST(zt::load_tokenizer(dir.path.string())->pad_id() == 1);
  dir.write("config.json", R"({"pad_token_id": 2})");
  BOOST_TEST(zt::load_tokenizer(dir.path.string())->pad_id() == 2);
  dir.write("config.json", R"({"pad_token_id": 2)");
  zt::test::check_error_mentions([&] { zt::load_tokenizer(dir.path.string()); }, {"config.json", "not valid JSON"});
}

BOOST_AUTO_TEST_CASE(bad_inputs_name_file_and_line) {
  TempDir dir;
  const std::string good = jsonl_row("\n\nHuman: Hi\n\nAssistant:", " Hello.");
  auto expect_error = [&](const std::string& name, const std::string& text, std::vector<std::string> parts) {
    const std::string path = dir.write(name, text);
    const std::string out = dir.file("out-" + name);
    zt::test::check_error_mentions([&] { zt::run_prep(options_for(path, out)); }, parts);
    BOOST_TEST(!fs::exists(out), name << ": the failed run left " << out);
  };
  expect_error("malformed.jsonl", good + good + "{\"prompt\": \"x\", \"chosen\": \n" + good, {"malformed.jsonl:3", "malformed JSON"});
  expect_error("missing.jsonl", good + R"({"prompt": "x", "response": " y"})" "\n", {"missing.jsonl:2", "missing column 'chosen'", "prompt, response", "--skip-bad-rows"});
  expect_error("empty.jsonl", good + good + good + jsonl_row("p", ""), {"empty.jsonl:4", "empty response (column 'chosen')"});
  expect_error("number.jsonl", R"({"prompt": 5, "chosen": " y"})" "\n", {"number.jsonl:1", "column 'prompt' is not a string"});
  expect_error("list.jsonl", good + "[1, 2]\n", {"list.jsonl:2", "must be a JSON object"});
  expect_error("array.json", "[\n  {\"prompt\": \"a\", \"chosen\": \" b\"},\n  {\"prompt\": \"a\",\n   \"chosen\" \" b\"}\n]",
               {"array.json:4", "malformed JSON"});
  expect_error("array_missing.json", "[\n  {\"prompt\": \"a\", \"chosen\": \" b\"},\n  {\"prompt\": \"a\"}\n]",
               {"array_missing.json:3", "missing column 'chosen'"});
  expect_error("unclosed.json", "[\n  {\"prompt\": \"a\", \"chosen\": \" b\"},\n", {"unclosed.json:", "not closed"});
  expect_error("trailing.json", "[{\"prompt\": \"a\", \"chosen\": \" b\"},\n]", {"trailing.json:2", "','"});
  expect_error("all_empty.jsonl", "\n\n", {"no samples"});

  // A failed run into an existing directory leaves it exactly as it was.
  fs::create_directories(dir.path / "kept");
  dir.write("kept/notes.txt", "mine");
  const std::string bad = dir.write("bad.jsonl", good + "{oops}\n");
  zt::test::check_error([&] { zt::run_prep(options_for(bad, dir.file("kept"))); }, "bad.jsonl:2");
  BOOST_TEST(std::distance(fs::directory_iterator(dir.path / "kept"), fs::directory_iterator()) == 1);

  // No tokenizer in the directory: the path and the files looked for; a tokenizer.json that is
  // not byte-level BPE: the file and the key.
  fs::create_directories(dir.path / "bpe_model");
  zt::PrepOptions options = options_for(dir.write("ok.jsonl", good), dir.file("never"));
  options.tokenizer = dir.file("bpe_model");
  zt::test::check_error_mentions([&] { zt::run_prep(options); }, {dir.file("bpe_model"), "tokenizer.model", "tokenizer.json", "merges.txt"});
  dir.write("bpe_model/tokenizer.json", "{}");
  zt::test::check_error_mentions([&] { zt::run_prep(options); }, {dir.file("bpe_model") + "/tokenizer.json", "\"model\""});
  BOOST_TEST(!fs::exists(dir.file("never")));
  options = options_for(dir.file("no_such.jsonl"), dir.file("never"));
  zt::test::check_error(([&] { zt::run_prep(options); }), "no_such.jsonl");
  options = options_for(dir.file("ok.jsonl"), dir.file("never"));
  options.max_seq_len = 1;
  zt::test::check_error(([&] { zt::run_prep(options); }), "--max-seq-len");
  options.max_seq_len = 512;
  options.split = "a/b";
  zt::test::check_error(([&] { zt::run_prep(options); }), "--split");
}

BOOST_AUTO_TEST_CASE(skip_bad_rows_counts_reasons) {
  TempDir dir;
  const std::string good = jsonl_row("\n\nHuman: Hi\n\nAssistant:", " Hello.");
  const std::string path = dir.write("mixed.jsonl", good + R"({"prompt": "x"})" "\n" + jsonl_row("p", "") + good +
                                                        R"({"chosen": " y"})" "\n" + jsonl_row("p", "") +
                                                        jsonl_row(std::string(600, 'z'), " late"));
  zt::PrepOptions options = options_for(path, dir.file("out"));
  options.skip_bad_rows = true;
  options.max_seq_len = 64;
  const zt::PrepSummary summary = zt::run_prep(options);
  BOOST_TEST(summary.rows_read == 7);
  BOOST_TEST(summary.samples_written == 2);
  BOOST_TEST(summary.skipped.size() == 4u);
  BOOST_TEST(summary.skipped.at("missing column 'chosen'") == 1);
  BOOST_TEST(summary.skipped.at("missing column 'prompt'") == 1);
  BOOST_TEST(summary.skipped.at("empty response (column 'chosen')") == 2);
  BOOST_TEST(summary.skipped.at("no target token within --max-seq-len 64 (prompt too long)") == 1);
  const std::string text = zt::format_prep_summary(summary, options);
  BOOST_TEST(text.find("skipped           5") != std::string::npos, text);
  BOOST_TEST(text.find("2  empty response (column 'chosen')") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(refuses_existing_shards_unless_force) {
  TempDir dir;
  zt::PrepOptions options = options_for(kSamplePath, dir.file("data"));
  options.shard_samples = 75;  // 300 rows: 4 shards
  BOOST_REQUIRE(zt::run_prep(options).shard_paths.size() == 4u);
  dir.write("data/notes.txt", "kept");
  options.shard_samples = 1000;
  zt::test::check_error_mentions([&] { zt::run_prep(options); }, {"already holds 4 shard(s) of split 'train'", "--force"});
  BOOST_TEST(fs::exists(dir.path / "data" / "train-00003.h5"));
  // Another split in the same directory is fine.
  options.split = "test";
  BOOST_TEST(zt::run_prep(options).shard_paths.size() == 1u);
  // --force replaces the old train shards (all four) by the new one, and nothing else.
  options.split = "train";
  options.force = true;
  BOOST_TEST(zt::run_prep(options).shard_paths.size() == 1u);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path / "data")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  BOOST_TEST(names == (std::vector<std::string>{"notes.txt", "test-00000.h5", "train-00000.h5"}), boost::test_tools::per_element());
  BOOST_TEST(zt::TokenDataset::open(dir.file("data"), "train").num_samples() == kSampleRows);
}

BOOST_AUTO_TEST_SUITE_END()
