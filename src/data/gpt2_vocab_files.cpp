// vocab.json + merges.txt -> BpeTokenizer (data/gpt2_vocab_files.h).
#include "data/gpt2_vocab_files.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sha256.h"
#include "data/bpe_tokenizer.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// GPT2Tokenizer's default for unk_token, bos_token and eos_token.
constexpr const char* kGpt2EndOfText = "<|endoftext|>";

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path.string(), ": cannot open for reading");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ZT_CHECK(!in.bad(), path.string(), ": read error");
  return bytes;
}

TokenVocabulary parse_vocab(const std::string& bytes, const std::string& path) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& error) {
    fail(path, ": not valid JSON: ", error.what());
  }
  ZT_CHECK(document.is_object(), path, ": expected an object {token: id}");
  TokenVocabulary vocab;
  vocab.reserve(document.size());
  for (const auto& [token, id] : document.items()) {
    ZT_CHECK(id.is_number_integer(), path, ": the id of '", token, "' is ", id.dump(), ", not an integer");
    vocab.emplace(token, id.get<int32_t>());
  }
  return vocab;
}

std::vector<std::pair<std::string, std::string>> parse_merges(const std::string& bytes, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream lines(bytes);
  std::string line;
  int64_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (number == 1) {
      // transformers' GPT2Tokenizer drops the first line whatever it holds: it must be the header.
      ZT_CHECK(line.rfind("#version", 0) == 0, path, ":1: expected the '#version: 0.2' header line, found '", line,
               "' (transformers skips the first line, so a merge there would be lost)");
      continue;
    }
    if (line.empty()) continue;
    merges.push_back(parse_merge_line(line, cat(path, ":", number)));
  }
  return merges;
}

// The id of a named special token, or -1 when `content` is empty.
int64_t named_id(const BpeTokenizerSpec& spec, const std::string& content) {
  if (content.empty()) return -1;
  return find_token_id(spec, content).value();  // add_config_tokens made sure it exists
}

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_vocab_files(const std::string& dir_name) {
  const fs::path dir(dir_name);
  const fs::path vocab_path = dir / "vocab.json", merges_path = dir / "merges.txt";
  ZT_CHECK(fs::exists(merges_path), merges_path.string(), ": not found (a GPT-2 style tokenizer is vocab.json + merges.txt)");
  const std::string vocab_bytes = read_text_file(vocab_path), merges_bytes = read_text_file(merges_path);

  BpeTokenizerSpec spec;
  spec.path = vocab_path.string();
  Sha256 hash;
  hash.update(vocab_bytes);
  hash.update(merges_bytes);
  spec.sha256 = hash.hex_digest();
  spec.model.vocab = parse_vocab(vocab_bytes, vocab_path.string());
  spec.model.merges = parse_merges(merges_bytes, merges_path.string());
  spec.model.source = cat(vocab_path.string(), " + merges.txt");

  HfTokenizerConfig config = read_hf_tokenizer_config(dir);
  ZT_CHECK(!config.has_added_tokens_file, (dir / "added_tokens.json").string(),
           ": legacy added-token files are not supported; save the tokenizer with a current transformers "
           "(tokenizer.json or tokenizer_config.json's added_tokens_decoder)");
  for (const char* key : {"unk_token", "bos_token", "eos_token"})
    if (!config.named.count(key)) config.named[key] = AddedToken{kGpt2EndOfText, -1, true};
  spec.pre_tokenizer.set_byte_level(config.add_prefix_space.value_or(false), true);
  add_config_tokens(spec, config, dir.string());

  spec.bos_id = config.add_bos_token.value_or(false) ? named_id(spec, config.content("bos_token")) : -1;
  spec.eos_id = named_id(spec, config.content("eos_token"));
  spec.pad_id = choose_pad_id(spec, config);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace zt
