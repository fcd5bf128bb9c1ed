// SentencePiece tokenizer (data/sentencepiece_tokenizer.h): two processors over the same
// tokenizer.model bytes, one as the file says (with its dummy prefix, for the start of a text)
// and one with NormalizerSpec.add_dummy_prefix turned off (for text that continues another),
// plus the pad-id lookup in the model directory's HF json files.
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sha256.h"
#include "data/added_tokens.h"
#include "data/hf_tokenizer_config.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// Protobuf wire bytes that, appended to a serialized ModelProto, turn the dummy prefix off.
// Protobuf merges repeated occurrences of an embedded message field, and the last value of a
// scalar wins, so this overrides only that one flag:
//   0x1A 0x02  field 3 of ModelProto (normalizer_spec), length-delimited, 2 bytes follow
//   0x18 0x00  field 3 of NormalizerSpec (add_dummy_prefix), varint, value 0 (false)
// This is what HF's LlamaTokenizer(legacy=False) does through the protobuf classes.
constexpr char kNoDummyPrefixPatch[] = {0x1A, 0x02, 0x18, 0x00};

std::string read_binary_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open for reading");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ZT_CHECK(!in.bad(), path, ": read error");
  return bytes;
}

// The pad token named by one HF json file (`key` holds a string or {"content": ...}); empty if
// the file, key or a usable value is missing. A file that is not JSON is an error naming it.
std::string pad_token_from_json(const fs::path& path, const char* key) {
  if (!fs::exists(path)) return "";
  nlohmann::json document;
  try {
    std::ifstream in(path);
    document = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    fail(path.string(), ": not valid JSON (reading ", key, "): ", error.what());
  }
  if (!document.is_object() || !document.contains(key)) return "";
  const nlohmann::json& value = document[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return "";
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path) : path_(model_path) {
    const std::string bytes = read_binary_file(model_path);
    sha256_ = sha256_hex(bytes);
    const auto status = start_processor_.LoadFromSerializedProto(bytes);
    ZT_CHECK(status.ok(), model_path, ": not a SentencePiece model: ", status.ToString());
    const std::string patched = bytes + std::string(kNoDummyPrefixPatch, sizeof kNoDummyPrefixPatch);
    const auto patched_status = continuation_processor_.LoadFromSerializedProto(patched);
    ZT_CHECK(patched_status.ok(), model_path, ": cannot load it without its dummy prefix: ", patched_status.ToString());
    pad_id_ = find_pad_id(fs::path(model_path).parent_path());
    try {  // only chat data needs them: a file this reading refuses must not stop anything else
      find_special_tokens(fs::path(model_path).parent_path());
    } catch (const Error& error) {
      special_tokens_error_ = error.what();
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override { return run(start_processor_, text); }
  std::vector<int32_t> encode_continuation(std::string_view text) const override {
    return run(continuation_processor_, text);
  }
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override {
    ZT_CHECK(special_tokens_error_.empty(), path_, ": cannot tell the special tokens to match in text: ", special_tokens_error_);
    for (const std::string& token : unknown_special_tokens_)
      ZT_CHECK(text.find(token) == std::string_view::npos, path_, ": the text holds the special token '", token,
               "' that the tokenizer files name, but it is no piece of this SentencePiece model (HF would add it as a "
               "new id; zerotune does not grow vocabularies)");
    std::vector<TextPiece> pieces;
    special_tokens_.split(text, pieces);
    std::vector<int32_t> ids;
    for (const TextPiece& piece : pieces) {
      if (piece.token_id >= 0) {
        ids.push_back(piece.token_id);
        continue;
      }
      const std::vector<int32_t> piece_ids = run(start_processor_, piece.text);  // with the dummy prefix (legacy)
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    return ids;
  }

  std::string pieces_text(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) {
      ZT_CHECK(id >= 0 && id < vocab_size(), path_, ": token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
      if (start_processor_.IsByte(id)) {  // "<0x0A>" stands for one raw byte
        text += static_cast<char>(std::stoi(start_processor_.IdToPiece(id).substr(3, 2), nullptr, 16));
        continue;
      }
      if (start_processor_.IsControl(id) || start_processor_.IsUnknown(id)) {
        text += start_processor_.IdToPiece(id);
        continue;
      }
      const std::string& piece = start_processor_.IdToPiece(id);
      for (size_t at = 0; at < piece.size();) {
        if (piece.compare(at, 3, "\xE2\x96\x81") == 0) {  // U+2581 "▁" is a space
          text += ' ';
          at += 3;
        } else {
          text += piece[at++];
        }
      }
    }
    return text;
  }

  int64_t vocab_size() const override { return start_processor_.GetPieceSize(); }
  int64_t bos_id() const override { return start_processor_.bos_id(); }
  int64_t eos_id() const override { return start_processor_.eos_id(); }
  int64_t pad_id() const override { return pad_id_; }
  const std::string& file_path() const override { return path_; }
  const std::string& file_sha256() const override { return sha256_; }

 private:
  std::vector<int32_t> run(const sentencepiece::SentencePieceProcessor& processor, std::string_view text) const {
    std::vector<int> ids;
    const auto status = processor.Encode(text, &ids);
    ZT_CHECK(status.ok(), path_, ": SentencePiece could not encode a text: ", status.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  // An id for `token` if it is a real piece of the model (PieceToId answers unk for unknown ones).
  int64_t piece_id(const std::string& token) const {
    if (token.empty()) return -1;
    const int id = start_processor_.PieceToId(token);
    if (start_processor_.IsUnknown(id) && start_processor_.IdToPiece(id) != token) return -1;
    return id;
  }

  int64_t find_pad_id(const fs::path& dir) const {
    const fs::path config_path = dir / "config.json";
    if (fs::exists(config_path)) {
      nlohmann::json config;
      try {
        std::ifstream in(config_path);
        config = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& error) {
        fail(config_path.string(), ": not valid JSON (reading pad_token_id): ", error.what());
      }
      if (config.is_object() && config.contains("pad_token_id") && config["pad_token_id"].is_number_integer()) {
        const int64_t id = config["pad_token_id"].get<int64_t>();
        if (id >= 0 && id < vocab_size()) return id;
      }
    }
    for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
      const int64_t id = piece_id(pad_token_from_json(dir / file, "pad_token"));
      if (id >= 0) return id;
    }
    if (start_processor_.pad_id() >= 0) return start_processor_.pad_id();
    if (start_processor_.unk_id() >= 0) return start_processor_.unk_id();
    return 0;
  }

  // The special tokens matched in text by encode_with_special_tokens: the model's unk/bos/eos
  // pieces (HF LlamaTokenizer's defaults) and the HF json files' tokens that are pieces of the
  // model; the names that are not pieces are kept to refuse a text holding them.
  void find_special_tokens(const fs::path& dir) {
    std::vector<AddedToken> tokens;
    const auto add = [&](AddedToken token) {
      const int64_t id = piece_id(token.content);
      if (id < 0) {
        if (!token.content.empty()) unknown_special_tokens_.push_back(token.content);
        return;
      }
      token.id = static_cast<int32_t>(id);
      tokens.push_back(std::move(token));
    };
    const HfTokenizerConfig config = read_hf_tokenizer_config(dir);
    for (const AddedToken& token : config.added_tokens_decoder) add(token);
    for (const auto& [key, token] : config.named) add(token);
    for (const AddedToken& token : config.additional_special) add(token);
    for (const int id : {start_processor_.unk_id(), start_processor_.bos_id(), start_processor_.eos_id()})
      if (id >= 0) add(AddedToken{start_processor_.IdToPiece(id), id, true});
    special_tokens_ = AddedTokenMatcher(std::move(tokens));
  }

  std::string path_;
  std::string sha256_;
  AddedTokenMatcher special_tokens_;
  std::vector<std::string> unknown_special_tokens_;
  std::string special_tokens_error_;  // why the HF json files could not be read for them ("" when they could)
  sentencepiece::SentencePieceProcessor start_processor_;         // as the model file says
  sentencepiece::SentencePieceProcessor continuation_processor_;  // add_dummy_prefix = false
  int64_t pad_id_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace zt
