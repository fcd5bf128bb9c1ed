// tokenizer.json -> BpeTokenizer (data/tokenizer_json.h): each section is checked against the
// forms zerotune implements; anything else stops with the file, the key and the value.
#include "data/tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sha256.h"
#include "data/bpe_tokenizer.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Errors about one file: "FILE: KEY is VALUE: WHY".
class JsonChecker {
 public:
  explicit JsonChecker(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  [[noreturn]] void refuse(const std::string& key, const Json& value, const std::string& why) const {
    std::string shown = value.dump();
    if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    fail(path_, ": ", key, " is ", shown, ": ", why);
  }
  const Json& member(const Json& object, const std::string& parent, const char* key) const {
    const auto found = object.find(key);
    if (found == object.end()) fail(path_, ": ", parent, " has no \"", key, "\"");
    return *found;
  }
  std::string type_of(const Json& object, const std::string& key) const {
    if (!object.is_object()) refuse(key, object, "expected an object with a \"type\"");
    const auto type = object.find("type");
    if (type == object.end() || !type->is_string()) refuse(key, object, "expected an object with a \"type\"");
    return type->get<std::string>();
  }
  bool flag(const Json& object, const std::string& parent, const char* key, bool default_value) const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return default_value;
    if (!found->is_boolean()) refuse(cat(parent, ".", key), *found, "expected true or false");
    return found->get<bool>();
  }
  const std::string& string(const Json& value, const std::string& key) const {
    if (!value.is_string()) refuse(key, value, "expected a string");
    return value.get_ref<const std::string&>();
  }

 private:
  std::string path_;
};

constexpr const char* kSupported =
    "zerotune reads byte-level BPE tokenizers (GPT-2, OPT, Llama-3, Qwen2 ...) from tokenizer.json, and "
    "SentencePiece tokenizer.model files";

BpeModelSpec read_model(const JsonChecker& check, const Json& model) {
  const std::string type = model.is_object() && !model.contains("type") && model.contains("merges") ? "BPE"
                                                                                                   : check.type_of(model, "model");
  if (type != "BPE") check.refuse("model.type", type, cat("not a BPE model; ", kSupported));
  BpeModelSpec spec;
  spec.source = cat(check.path(), ": model");
  for (const char* key : {"dropout"}) {
    const auto found = model.find(key);
    if (found != model.end() && !found->is_null() && !(found->is_number() && found->get<double>() == 0.0))
      check.refuse(cat("model.", key), *found, "BPE dropout is a training-time option zerotune does not apply");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto found = model.find(key);
    if (found != model.end() && !found->is_null() && !(found->is_string() && found->get<std::string>().empty()))
      check.refuse(cat("model.", key), *found, "word prefixes/suffixes are not part of byte-level BPE; not supported");
  }
  if (check.flag(model, "model", "byte_fallback", false))
    check.refuse("model.byte_fallback", true, "byte fallback (SentencePiece-style BPE) is not supported; byte-level BPE needs none");
  spec.ignore_merges = check.flag(model, "model", "ignore_merges", false);
  spec.fuse_unk = check.flag(model, "model", "fuse_unk", false);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) spec.unk_token = check.string(model["unk_token"], "model.unk_token");

  const Json& vocab = check.member(model, "model", "vocab");
  if (!vocab.is_object()) check.refuse("model.vocab", vocab, "expected an object {token: id}");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) check.refuse(cat("model.vocab[\"", token, "\"]"), id, "expected an integer id");
    spec.vocab.emplace(token, id.get<int32_t>());
  }

  const Json& merges = check.member(model, "model", "merges");
  if (!merges.is_array()) check.refuse("model.merges", merges, "expected a list of merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    const std::string key = cat("model.merges[", i, "]");
    if (merge.is_string()) {
      spec.merges.push_back(parse_merge_line(merge.get_ref<const std::string&>(), cat(check.path(), ": ", key)));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      check.refuse(key, merge, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return spec;
}

std::vector<AddedToken> read_added_tokens(const JsonChecker& check, const Json& document) {
  std::vector<AddedToken> tokens;
  if (!document.contains("added_tokens") || document["added_tokens"].is_null()) return tokens;
  const Json& list = document["added_tokens"];
  if (!list.is_array()) check.refuse("added_tokens", list, "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = cat("added_tokens[", i, "]");
    const Json& entry = list[i];
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() || entry["id"].get<int64_t>() < 0 ||
        entry["id"].get<int64_t>() >= INT32_MAX)
      check.refuse(key, entry, "expected {\"id\": a token id, \"content\": ...}");
    AddedToken token;
    token.id = entry["id"].get<int32_t>();
    token.content = check.string(check.member(entry, key, "content"), key + ".content");
    token.special = check.flag(entry, key, "special", false);
    token.single_word = check.flag(entry, key, "single_word", false);
    token.lstrip = check.flag(entry, key, "lstrip", false);
    token.rstrip = check.flag(entry, key, "rstrip", false);
    token.normalized = check.flag(entry, key, "normalized", !token.special);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

void read_normalizer(const JsonChecker& check, const Json& normalizer, const std::string& key, std::vector<NormalForm>& forms) {
  if (normalizer.is_null()) return;
  const std::string type = check.type_of(normalizer, key);
  if (type == "NFC") forms.push_back(NormalForm::kNFC);
  else if (type == "NFD") forms.push_back(NormalForm::kNFD);
  else if (type == "NFKC") forms.push_back(NormalForm::kNFKC);
  else if (type == "NFKD") forms.push_back(NormalForm::kNFKD);
  else if (type == "Sequence") {
    const Json& list = check.member(normalizer, key, "normalizers");
    if (!list.is_array()) check.refuse(key + ".normalizers", list, "expected a list");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(check, list[i], cat(key, ".normalizers[", i, "]"), forms);
  } else {
    check.refuse(key + ".type", type, "zerotune applies the Unicode normal forms NFC, NFD, NFKC, NFKD (or a Sequence of them) only");
  }
}

// One pre-tokenizer step; returns true for the ByteLevel step.
bool read_pre_tokenizer_step(const JsonChecker& check, const Json& step, const std::string& key, ByteLevelPreTokenizer& pre) {
  const std::string type = check.type_of(step, key);
  if (type == "ByteLevel") {
    // tokenizers' ByteLevel defaults: add_prefix_space and use_regex true
    pre.set_byte_level(check.flag(step, key, "add_prefix_space", true), check.flag(step, key, "use_regex", true));
    return true;
  }
  if (type != "Split")
    check.refuse(key + ".type", type, cat("zerotune's byte-level pre-tokenizer is ByteLevel, or Split(Regex, Isolated) steps "
                                          "followed by ByteLevel; ", kSupported));
  const Json& behavior = check.member(step, key, "behavior");
  if (behavior != "Isolated") check.refuse(key + ".behavior", behavior, "only the Isolated behaviour is supported");
  if (check.flag(step, key, "invert", false)) check.refuse(key + ".invert", true, "inverted splits are not supported");
  const Json& pattern = check.member(step, key, "pattern");
  if (pattern.is_object() && pattern.contains("Regex"))
    pre.add_split(Pcre2Regex(check.string(pattern["Regex"], key + ".pattern.Regex"), Pcre2Regex::Syntax::kRegex,
                             cat(check.path(), ": ", key, ".pattern.Regex")));
  else if (pattern.is_object() && pattern.contains("String"))
    pre.add_split(Pcre2Regex(check.string(pattern["String"], key + ".pattern.String"), Pcre2Regex::Syntax::kLiteral,
                             cat(check.path(), ": ", key, ".pattern.String")));
  else
    check.refuse(key + ".pattern", pattern, "expected {\"Regex\": ...} or {\"String\": ...}");
  return false;
}

ByteLevelPreTokenizer read_pre_tokenizer(const JsonChecker& check, const Json& pre_tokenizer) {
  ByteLevelPreTokenizer pre;
  const std::string key = "pre_tokenizer";
  if (pre_tokenizer.is_null())
    check.refuse(key, pre_tokenizer, cat("a BPE tokenizer without a ByteLevel pre-tokenizer is not byte-level; ", kSupported));
  if (check.type_of(pre_tokenizer, key) != "Sequence") {
    if (!read_pre_tokenizer_step(check, pre_tokenizer, key, pre))
      check.refuse(key, pre_tokenizer, "a Split without a following ByteLevel is not a byte-level pre-tokenizer");
    return pre;
  }
  const Json& steps = check.member(pre_tokenizer, key, "pretokenizers");
  if (!steps.is_array() || steps.empty()) check.refuse(key + ".pretokenizers", steps, "expected a non-empty list");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string step_key = cat(key, ".pretokenizers[", i, "]");
    const bool byte_level = read_pre_tokenizer_step(check, steps[i], step_key, pre);
    if (byte_level != (i + 1 == steps.size()))
      check.refuse(step_key, steps[i], "the ByteLevel step must come last, once (Split steps before it)");
  }
  return pre;
}

struct TextEnds {
  std::optional<int32_t> bos;  // the special token put before a text
  std::optional<int32_t> eos;  // ... after it
};

int32_t template_token_id(const JsonChecker& check, const Json& processor, const std::string& key, const std::string& name) {
  const Json& specials = check.member(processor, key, "special_tokens");
  if (!specials.contains(name)) check.refuse(key + ".special_tokens", specials, cat("has no entry for '", name, "'"));
  const Json& ids = check.member(specials[name], cat(key, ".special_tokens[\"", name, "\"]"), "ids");
  if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer())
    check.refuse(cat(key, ".special_tokens[\"", name, "\"].ids"), ids, "expected exactly one id");
  return ids[0].get<int32_t>();
}

void read_post_processor(const JsonChecker& check, const Json& processor, const std::string& key, TextEnds& ends) {
  if (processor.is_null()) return;
  const std::string type = check.type_of(processor, key);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const Json& list = check.member(processor, key, "processors");
    if (!list.is_array()) check.refuse(key + ".processors", list, "expected a list");
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(check, list[i], cat(key, ".processors[", i, "]"), ends);
    return;
  }
  if (type == "RobertaProcessing") {
    for (const char* side : {"cls", "sep"}) {
      const Json& pair = check.member(processor, key, side);
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer())
        check.refuse(cat(key, ".", side), pair, "expected [token, id]");
      (std::string(side) == "cls" ? ends.bos : ends.eos) = pair[1].get<int32_t>();
    }
    return;
  }
  if (type != "TemplateProcessing")
    check.refuse(key + ".type", type, "zerotune reads TemplateProcessing, RobertaProcessing, ByteLevel and Sequence post-processors");
  const Json& single = check.member(processor, key, "single");
  if (!single.is_array()) check.refuse(key + ".single", single, "expected a list of template pieces");
  std::vector<int32_t> before, after;
  bool seen_text = false;
  for (const Json& piece : single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      if (seen_text) check.refuse(key + ".single", single, "the text ($A) appears twice");
      seen_text = true;
    } else if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].contains("id")) {
      const int32_t id = template_token_id(check, processor, key, check.string(piece["SpecialToken"]["id"], key + ".single"));
      (seen_text ? after : before).push_back(id);
    } else {
      check.refuse(key + ".single", piece, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_text || before.size() > 1 || after.size() > 1)
    check.refuse(key + ".single", single, "zerotune supports templates with at most one special token before and one after $A");
  if (!before.empty()) ends.bos = before[0];
  if (!after.empty()) ends.eos = after[0];
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open for reading");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ZT_CHECK(!in.bad(), path, ": read error");
  Json document;
  try {
    document = Json::parse(bytes);
  } catch (const Json::exception& error) {
    fail(path, ": not valid JSON: ", error.what());
  }
  const JsonChecker check(path);
  ZT_CHECK(document.is_object(), path, ": expected a JSON object (an HF tokenizers tokenizer.json)");

  BpeTokenizerSpec spec;
  spec.path = path;
  spec.sha256 = sha256_hex(bytes);
  spec.model = read_model(check, check.member(document, "the file", "model"));
  spec.added_tokens = read_added_tokens(check, document);
  read_normalizer(check, document.value("normalizer", Json()), "normalizer", spec.normalizers);
  spec.pre_tokenizer = read_pre_tokenizer(check, document.value("pre_tokenizer", Json()));
  TextEnds ends;
  read_post_processor(check, document.value("post_processor", Json()), "post_processor", ends);

  const fs::path dir = fs::path(path).parent_path();
  const HfTokenizerConfig config = read_hf_tokenizer_config(dir);
  add_config_tokens(spec, config, dir.string());
  spec.bos_id = ends.bos.value_or(-1);
  if (ends.eos) {
    spec.eos_id = *ends.eos;
  } else if (const auto id = find_token_id(spec, config.content("eos_token")); id && !config.content("eos_token").empty()) {
    spec.eos_id = *id;
  } else if (config.config_eos_token_id && *config.config_eos_token_id >= 0 && *config.config_eos_token_id < spec_vocab_size(spec)) {
    spec.eos_id = *config.config_eos_token_id;
  }
  spec.pad_id = choose_pad_id(spec, config);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace zt
