// Tests of the byte-level BPE tokenizer (data/byte_level.h, bpe_model.h, added_tokens.h,
// byte_level_pre_tokenizer.h, tokenizer_json.h, gpt2_vocab_files.h) on tiny hand-written
// tokenizers: the byte table and its round trip, merge order (rank, then leftmost),
// ignore_merges, Split + ByteLevel, add_prefix_space and continuations, NFC, the added-token
// flags, BOS/EOS from the post-processor and from OPT-style json files, the tokenizer choice of
// load_tokenizer, and every refused input with the file, key and value in its error. (HF parity
// on trained tokenizers: tests/oracle/test_bpe_tokenizer.py.)
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/sha256.h"
#include "data/added_tokens.h"
#include "data/byte_level.h"
#include "data/data_model_check.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace {

using Json = nlohmann::json;
using zt::test::TempDir;

// The byte-level vocabulary: each byte's character with the byte as its id.
Json byte_vocab() {
  Json vocab = Json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[zt::byte_level_encode(std::string(1, static_cast<char>(byte)))] = byte;
  return vocab;
}

// A tokenizer.json with GPT-2's ByteLevel pre-tokenizer, the byte vocabulary and `merges`
// (written as raw text, mapped here); each merge's result gets the next id from 256 on.
Json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json vocab = byte_vocab();
  Json merge_list = Json::array();
  int32_t next = 256;
  for (const auto& [left, right] : merges) {
    const std::string l = zt::byte_level_encode(left), r = zt::byte_level_encode(right);
    merge_list.push_back(l + " " + r);
    if (!vocab.contains(l + r)) vocab[l + r] = next++;
  }
  return {{"version", "1.0"},
          {"added_tokens", Json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
            {"vocab", vocab}, {"merges", merge_list}}}};
}

std::unique_ptr<zt::Tokenizer> load(const TempDir& dir, const Json& document, const std::string& name = "tokenizer.json") {
  dir.write(name, document.dump());
  return zt::load_tokenizer(dir.path.string());
}

int32_t id_of(const Json& document, const std::string& raw_text) {
  return document["model"]["vocab"][zt::byte_level_encode(raw_text)].get<int32_t>();
}

std::vector<int32_t> bytes_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bpe_tokenizer)

BOOST_AUTO_TEST_CASE(byte_level_table_round_trips) {
  BOOST_TEST(zt::byte_level_char(' ') == 0x120u);   // 'Ġ'
  BOOST_TEST(zt::byte_level_char('\n') == 0x10Au);  // 'Ċ'
  BOOST_TEST(zt::byte_level_char('a') == static_cast<uint32_t>('a'));
  BOOST_TEST(zt::byte_level_char(0xE9) == 0xE9u);  // printable Latin-1 stands for itself
  BOOST_TEST(zt::byte_level_char(0xAD) == 0x143u);  // the soft hyphen is the last shifted byte
  BOOST_TEST(zt::byte_level_encode(" hi\n") == "\xC4\xA0hi\xC4\x8A");
  std::string all;
  for (int byte = 0; byte < 256; ++byte) all += static_cast<char>(byte);
  const std::string mapped = zt::byte_level_encode(all + "\xE2\x82\xAC broken \xC3");
  std::string back;
  BOOST_TEST(zt::byte_level_decode(mapped, back));
  BOOST_TEST((back == all + "\xE2\x82\xAC broken \xC3"));
  std::string partial;
  BOOST_TEST(!zt::byte_level_decode("ab\xE2\x82\xAC", partial));  // '€' stands for no byte
  BOOST_TEST(partial == "ab");
}

BOOST_AUTO_TEST_CASE(merges_by_rank_then_leftmost) {
  TempDir dir;
  Json document = tiny_tokenizer({{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}});
  auto tokenizer = load(dir, document);
  BOOST_TEST(tokenizer->encode("abc") == std::vector<int32_t>{id_of(document, "abc")});
  BOOST_TEST(tokenizer->encode("aaa") == (std::vector<int32_t>{id_of(document, "aa"), 'a'}));  // leftmost first
  // "a b" ranked before "b c": [ab][c].
  document = tiny_tokenizer({{"a", "b"}, {"b", "c"}});
  tokenizer = load(dir, document);
  BOOST_TEST(tokenizer->encode("abc") == (std::vector<int32_t>{id_of(document, "ab"), 'c'}));
  // The same merges as [left, right] pairs.
  Json pairs = document;
  pairs["model"]["merges"] = Json::array({Json::array({"a", "b"}), Json::array({"b", "c"})});
  BOOST_TEST(load(dir, pairs)->encode("abc") == tokenizer->encode("abc"));
  // GPT-2's regex: no merge crosses " world"'s boundary; pieces_text gives the bytes back.
  document = tiny_tokenizer({{"o", " "}, {" ", "w"}});
  tokenizer = load(dir, document);
  BOOST_TEST(tokenizer->encode("lo world") == (std::vector<int32_t>{'l', 'o', id_of(document, " w"), 'o', 'r', 'l', 'd'}));
  BOOST_TEST(tokenizer->vocab_size() == 258);
  BOOST_TEST(tokenizer->bos_id() == -1);
  BOOST_TEST(tokenizer->eos_id() == -1);
  BOOST_TEST(tokenizer->pad_id() == 0);
  BOOST_TEST(tokenizer->file_sha256() == zt::sha256_file_hex(dir.file("tokenizer.json")));
}

BOOST_AUTO_TEST_CASE(ignore_merges_split_and_prefix_space) {
  TempDir dir;
  Json document = tiny_tokenizer({{"1", "2"}, {"3", "4"}, {"12", "3"}, {"4", "5"}});
  document["model"]["vocab"]["xyz"] = 300;
  BOOST_TEST(load(dir, document)->encode("xyz") == bytes_of("xyz"));
  document["model"]["ignore_merges"] = true;
  BOOST_TEST(load(dir, document)->encode("xyz") == std::vector<int32_t>{300});
  // The whole number is one GPT-2 piece: [12][34][5]; Llama-3's \p{N}{1,3} cuts it: [123][45].
  BOOST_TEST(load(dir, document)->encode("12345") ==
             (std::vector<int32_t>{id_of(document, "12"), id_of(document, "34"), '5'}));
  document["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"}, {"pattern", {{"Regex", R"(\p{N}{1,3}|[^\p{N}]+)"}}}, {"behavior", "Isolated"}, {"invert", false}},
                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  BOOST_TEST(load(dir, document)->encode("12345") == (std::vector<int32_t>{id_of(document, "123"), id_of(document, "45")}));
  // add_prefix_space: a text's start gets a space, a continuation's does not.
  document = tiny_tokenizer({{" ", "h"}});
  document["pre_tokenizer"]["add_prefix_space"] = true;
  auto tokenizer = load(dir, document);
  BOOST_TEST(tokenizer->encode("hi") == (std::vector<int32_t>{id_of(document, " h"), 'i'}));
  BOOST_TEST(tokenizer->encode_continuation("hi") == bytes_of("hi"));
  BOOST_TEST(tokenizer->encode_continuation(" hi") == tokenizer->encode("hi"));
  BOOST_TEST(tokenizer->encode("").empty());
}

BOOST_AUTO_TEST_CASE(nfc_added_tokens_and_decoding) {
  TempDir dir;
  Json document = tiny_tokenizer({});
  document["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  document["added_tokens"] = {{{"id", 300}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
                              {{"id", 301}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}, {"normalized", false}},
                              {{"id", 302}, {"content", "café"}, {"special", false}, {"normalized", true}}};
  document["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                                {"pair", Json::array()},
                                {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {300}}, {"tokens", {"</s>"}}}}}}};
  const auto tokenizer = load(dir, document);
  BOOST_TEST(tokenizer->bos_id() == 300);
  BOOST_TEST(tokenizer->eos_id() == -1);  // no EOS after $A and no json file naming one
  BOOST_TEST(tokenizer->vocab_size() == 303);
  BOOST_TEST(tokenizer->encode("e\xCC\x81") == bytes_of("\xC3\xA9"));  // "e" + U+0301 -> NFC "é" (C3 A9)
  BOOST_TEST(tokenizer->encode("x</s>y") == (std::vector<int32_t>{'x', 300, 'y'}));
  BOOST_TEST(tokenizer->encode("a  <mask>") == (std::vector<int32_t>{'a', 301}));  // lstrip takes the spaces
  BOOST_TEST(tokenizer->encode("cafe\xCC\x81!") == (std::vector<int32_t>{302, '!'}));  // found after NFC
  // Decoding: byte characters back to bytes, a character split over two ids comes back whole.
  const std::vector<int32_t> ids = tokenizer->encode("</s>日本 ok");
  BOOST_TEST(tokenizer->pieces_text(ids) == "</s>日本 ok");
  BOOST_TEST(tokenizer->pieces_text({0xE6}) == "\xE6");
  zt::test::check_error([&] { tokenizer->pieces_text({303}); }, "token id 303");
  zt::test::check_error([&] { tokenizer->encode("bad \xC3("); }, "not valid UTF-8");
}

BOOST_AUTO_TEST_CASE(added_token_matching_rules) {
  zt::AddedTokenMatcher matcher({{"<a>", 1}, {"<a><b>", 2}, {"[R]", 3, false, false, false, true}, {"qw", 4, false, true}});
  auto split = [&](const std::string& text) {
    std::vector<zt::TextPiece> pieces;
    matcher.split(text, pieces);
    std::vector<std::string> shown;
    for (const zt::TextPiece& piece : pieces)  // "#ID" before a token's text
      shown.push_back(piece.token_id >= 0 ? zt::cat('#', piece.token_id, piece.text) : piece.text);
    return shown;
  };
  BOOST_TEST(split("x<a><b>y<a>") == (std::vector<std::string>{"x", "#2<a><b>", "y", "#1<a>"}));  // leftmost, longest
  BOOST_TEST(split("[R]  \n x") == (std::vector<std::string>{"#3[R]  \n ", "x"}));                 // rstrip
  BOOST_TEST(split("qw qwx _qw é qw") == (std::vector<std::string>{"#4qw", " qwx _qw é ", "#4qw"}));  // single_word
  BOOST_TEST(split("éqw") == (std::vector<std::string>{"éqw"}));  // a letter before it, also beyond ASCII
  BOOST_TEST(split("").empty());
}

BOOST_AUTO_TEST_CASE(opt_style_vocab_and_merges_directory) {
  TempDir dir;
  Json vocab = byte_vocab();
  vocab["<s>"] = 256;
  vocab["<pad>"] = 257;
  vocab["</s>"] = 258;
  vocab[zt::byte_level_encode(" h")] = 259;
  const std::string vocab_text = vocab.dump(), merges_text = "#version: 0.2\n\xC4\xA0 h\n";
  dir.write("vocab.json", vocab_text);
  dir.write("merges.txt", merges_text);
  dir.write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": {"content": "</s>", "normalized": true},
    "eos_token": "</s>", "unk_token": "</s>", "pad_token": "<pad>", "tokenizer_class": "GPT2Tokenizer"})");
  auto tokenizer = zt::load_tokenizer(dir.path.string());
  BOOST_TEST(tokenizer->bos_id() == 258);
  BOOST_TEST(tokenizer->eos_id() == 258);
  BOOST_TEST(tokenizer->pad_id() == 257);
  BOOST_TEST(tokenizer->encode("x</s> hi") == (std::vector<int32_t>{'x', 258, 259, 'i'}));
  BOOST_TEST(tokenizer->encode("<s>").size() == 3u);  // not a special token of this tokenizer: plain text
  BOOST_TEST(tokenizer->file_path() == dir.file("vocab.json"));
  BOOST_TEST(tokenizer->file_sha256() == zt::sha256_hex(vocab_text + merges_text));
  const auto files = zt::find_tokenizer_files(dir.path.string());
  BOOST_REQUIRE(files.has_value());
  BOOST_TEST(zt::tokenizer_files_sha256(*files) == tokenizer->file_sha256());
  // config.json's pad_token_id comes first; without add_bos_token there is no BOS.
  dir.write("config.json", R"({"pad_token_id": 256})");
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>", "unk_token": "</s>", "bos_token": "</s>"})");
  tokenizer = zt::load_tokenizer(dir.path.string());
  BOOST_TEST(tokenizer->pad_id() == 256);
  BOOST_TEST(tokenizer->bos_id() == -1);

  // The data check finds this tokenizer in a model directory.
  zt::ShardAttributes attrs;
  attrs.vocab_size = 100;
  attrs.tokenizer_sha256 = tokenizer->file_sha256();
  zt::check_data_matches_model(attrs, "data", dir.path.string(), 1000);
  attrs.tokenizer_sha256 = std::string(64, '0');
  zt::test::check_error_mentions([&] { zt::check_data_matches_model(attrs, "data", dir.path.string(), 1000); },
                                 {dir.file("vocab.json"), "another tokenizer"});
}

BOOST_AUTO_TEST_CASE(load_tokenizer_chooses_by_files) {
  TempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer({}).dump());
  auto files = zt::find_tokenizer_files(dir.path.string());
  BOOST_REQUIRE(files.has_value());
  BOOST_TEST((files->kind == zt::TokenizerKind::kTokenizerJson));
  dir.write("vocab.json", "{}");
  dir.write("merges.txt", "#version: 0.2\n");
  BOOST_TEST((zt::find_tokenizer_files(dir.path.string())->kind == zt::TokenizerKind::kTokenizerJson));
  dir.write("tokenizer.model", "");  // LLaMA-1/2 directories ship both: SentencePiece stays preferred
  files = zt::find_tokenizer_files(dir.path.string());
  BOOST_TEST((files->kind == zt::TokenizerKind::kSentencePiece));
  BOOST_TEST(files->path == dir.file("tokenizer.model"));
  BOOST_TEST((zt::find_tokenizer_files(dir.file("tokenizer.json"))->kind == zt::TokenizerKind::kTokenizerJson));
  BOOST_TEST((zt::find_tokenizer_files(dir.file("vocab.json"))->kind == zt::TokenizerKind::kGpt2VocabMerges));
  BOOST_TEST(zt::load_tokenizer(dir.file("tokenizer.json"))->vocab_size() == 256);

  TempDir empty;
  BOOST_TEST(!zt::find_tokenizer_files(empty.path.string()).has_value());
  zt::test::check_error_mentions([&] { zt::load_tokenizer(empty.path.string()); },
                                 {empty.path.string(), "no tokenizer found", "tokenizer.model", "tokenizer.json", "vocab.json + merges.txt"});
  empty.write("vocab.json", "{}");
  zt::test::check_error(([&] { zt::load_tokenizer(empty.path.string()); }), "no merges.txt");
}

BOOST_AUTO_TEST_CASE(refused_inputs_name_file_key_and_value) {
  TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  auto expect = [&](const Json& document, const std::vector<std::string>& parts) {
    dir.write("tokenizer.json", document.dump());
    std::vector<std::string> all = parts;
    all.push_back(path);
    zt::test::check_error_mentions([&] { zt::load_tokenizer(dir.path.string()); }, all);
  };
  const Json good = tiny_tokenizer({{"a", "b"}});

  Json bad = good;
  bad["model"].erase("merges");
  expect(bad, {"model has no \"merges\""});
  bad = good;
  bad["model"]["merges"] = {"a b", "a q"};
  expect(bad, {"merge 1", "'aq'", "not in the vocabulary"});
  bad["model"]["merges"] = {"a b c"};
  expect(bad, {"model.merges[0]", "two tokens separated by one space"});
  bad = good;
  bad["model"]["type"] = "WordPiece";
  expect(bad, {"model.type", "WordPiece", "not a BPE model"});
  bad["model"]["type"] = "Unigram";
  expect(bad, {"model.type", "Unigram"});
  bad = good;
  bad["model"]["dropout"] = 0.1;
  expect(bad, {"model.dropout", "0.1"});
  bad = good;
  bad["model"]["continuing_subword_prefix"] = "##";
  expect(bad, {"model.continuing_subword_prefix", "##"});
  bad = good;
  bad["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}+"}}}, {"behavior", "Isolated"}},
                                             {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  expect(bad, {"pre_tokenizer.pretokenizers[0].pattern.Regex", "(\\p{L}+", "does not compile"});
  bad["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "x"}};
  bad["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect(bad, {"pre_tokenizer.pretokenizers[0].behavior", "Removed", "Isolated"});
  bad["pre_tokenizer"]["pretokenizers"] = {{{"type", "ByteLevel"}}, {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Isolated"}}};
  expect(bad, {"pre_tokenizer.pretokenizers[0]", "must come last"});
  bad["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  expect(bad, {"pre_tokenizer.type", "Metaspace"});
  bad["pre_tokenizer"] = nullptr;
  expect(bad, {"pre_tokenizer", "not byte-level"});
  bad = good;
  bad["normalizer"] = {{"type", "Lowercase"}};
  expect(bad, {"normalizer.type", "Lowercase"});
  bad = good;
  bad["post_processor"] = {{"type", "BertProcessing"}};
  expect(bad, {"post_processor.type", "BertProcessing"});
  bad = good;
  bad["added_tokens"] = {{{"content", "<x>"}}};
  expect(bad, {"added_tokens[0]"});
  dir.write("tokenizer.json", "{\"model\": ");
  zt::test::check_error_mentions([&] { zt::load_tokenizer(dir.path.string()); }, {path, "not valid JSON"});

  // A special token the json files name must exist.
  dir.write("tokenizer.json", good.dump());
  dir.write("tokenizer_config.json", R"({"eos_token": "<eos>"})");
  zt::test::check_error_mentions([&] { zt::load_tokenizer(dir.path.string()); }, {"eos_token", "'<eos>'", "neither in the vocabulary"});
  dir.write("tokenizer_config.json", R"({"eos_token": 5})");
  zt::test::check_error_mentions([&] { zt::load_tokenizer(dir.path.string()); }, {"tokenizer_config.json: eos_token", "5"});

  // vocab.json + merges.txt: the header line and each merge line.
  TempDir gpt2;
  gpt2.write("vocab.json", byte_vocab().dump());
  gpt2.write("merges.txt", "a b\n");
  zt::test::check_error_mentions([&] { zt::load_tokenizer(gpt2.path.string()); }, {"merges.txt:1", "#version"});
  gpt2.write("merges.txt", "#version: 0.2\na b\na b c\n");
  zt::test::check_error_mentions([&] { zt::load_tokenizer(gpt2.path.string()); }, {"merges.txt:3", "'a b c'"});
  gpt2.write("merges.txt", "#version: 0.2\n");  // no tokenizer_config.json: GPT-2's "<|endoftext|>" defaults
  zt::test::check_error_mentions([&] { zt::load_tokenizer(gpt2.path.string()); }, {"'<|endoftext|>'", "neither in the vocabulary"});
}

BOOST_AUTO_TEST_SUITE_END()
