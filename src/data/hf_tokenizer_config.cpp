// Reading the HF json files beside a BPE tokenizer (data/hf_tokenizer_config.h).
#include "data/hf_tokenizer_config.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The names transformers' SPECIAL_TOKENS_ATTRIBUTES gives the single special tokens.
constexpr const char* kNamedTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

// The file's JSON object, or an empty object when the file does not exist.
Json read_optional_object(const fs::path& path) {
  if (!fs::exists(path)) return Json::object();
  Json document;
  try {
    std::ifstream in(path);
    document = Json::parse(in);
  } catch (const Json::exception& error) {
    fail(path.string(), ": not valid JSON: ", error.what());
  }
  ZT_CHECK(document.is_object(), path.string(), ": expected a JSON object, found ", document.type_name());
  return document;
}

bool flag(const Json& object, const char* key, bool default_value, const std::string& where) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return default_value;
  ZT_CHECK(found->is_boolean(), where, ".", key, " must be true or false, not ", found->dump());
  return found->get<bool>();
}

// A token value: a string, an AddedToken object, or null (nullopt). `where`: file and key.
std::optional<AddedToken> token_value(const Json& value, bool special, const std::string& where) {
  if (value.is_null()) return std::nullopt;
  AddedToken token;
  token.special = special;
  if (value.is_string()) {
    token.content = value.get<std::string>();
    return token;
  }
  ZT_CHECK(value.is_object() && value.contains("content") && value["content"].is_string(), where,
           " must be a token string or an object with a \"content\" string, not ", value.dump());
  token.content = value["content"].get<std::string>();
  token.lstrip = flag(value, "lstrip", false, where);
  token.rstrip = flag(value, "rstrip", false, where);
  token.single_word = flag(value, "single_word", false, where);
  token.normalized = flag(value, "normalized", !special, where);
  token.special = flag(value, "special", special, where);
  return token;
}

// The named tokens and additional_special_tokens of one file, over what `config` holds.
void read_named_tokens(const Json& document, const std::string& file, HfTokenizerConfig& config) {
  for (const char* key : kNamedTokenKeys) {
    if (!document.contains(key)) continue;
    const std::optional<AddedToken> token = token_value(document[key], true, cat(file, ": ", key));
    if (token) {
      config.named[key] = *token;
    } else {
      config.named.erase(key);
    }
  }
  if (document.contains("additional_special_tokens") && !document["additional_special_tokens"].is_null()) {
    const Json& list = document["additional_special_tokens"];
    ZT_CHECK(list.is_array(), file, ": additional_special_tokens must be a list, not ", list.dump());
    config.additional_special.clear();
    for (size_t i = 0; i < list.size(); ++i)
      if (auto token = token_value(list[i], true, cat(file, ": additional_special_tokens[", i, "]")))
        config.additional_special.push_back(*token);
  }
}

std::optional<int64_t> config_token_id(const Json& config, const char* key, const std::string& file) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  if (found->is_number_integer()) return found->get<int64_t>();
  if (found->is_array() && !found->empty() && (*found)[0].is_number_integer()) return (*found)[0].get<int64_t>();
  fail(file, ": ", key, " must be an integer (or a list of integers), not ", found->dump());
}

}  // namespace

std::string HfTokenizerConfig::content(const std::string& key) const {
  const auto found = named.find(key);
  return found == named.end() ? std::string() : found->second.content;
}

HfTokenizerConfig read_hf_tokenizer_config(const fs::path& dir) {
  HfTokenizerConfig config;
  const fs::path config_path = dir / "tokenizer_config.json";
  const Json tokenizer_config = read_optional_object(config_path);
  const std::string config_file = config_path.string();
  read_named_tokens(tokenizer_config, config_file, config);
  if (tokenizer_config.contains("added_tokens_decoder")) {
    const Json& decoder = tokenizer_config["added_tokens_decoder"];
    ZT_CHECK(decoder.is_object(), config_file, ": added_tokens_decoder must be an object {\"id\": token}, not ", decoder.dump());
    for (const auto& [id_text, value] : decoder.items()) {
      const std::string where = cat(config_file, ": added_tokens_decoder[\"", id_text, "\"]");
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(id_text, &used);
        if (used != id_text.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      ZT_CHECK(id >= 0 && id < INT32_MAX, where, ": the key must be a token id");
      std::optional<AddedToken> token = token_value(value, false, where);
      ZT_CHECK(token.has_value(), where, " must be a token object, not null");
      token->id = static_cast<int32_t>(id);
      config.added_tokens_decoder.push_back(*token);
    }
  } else {
    const fs::path map_path = dir / "special_tokens_map.json";
    read_named_tokens(read_optional_object(map_path), map_path.string(), config);
  }
  for (const char* key : {"add_bos_token", "add_prefix_space"}) {
    if (!tokenizer_config.contains(key) || tokenizer_config[key].is_null()) continue;
    const bool value = flag(tokenizer_config, key, false, config_file);
    (std::string(key) == "add_bos_token" ? config.add_bos_token : config.add_prefix_space) = value;
  }

  const fs::path model_config_path = dir / "config.json";
  const Json model_config = read_optional_object(model_config_path);
  config.config_pad_token_id = config_token_id(model_config, "pad_token_id", model_config_path.string());
  config.config_eos_token_id = config_token_id(model_config, "eos_token_id", model_config_path.string());
  config.has_added_tokens_file = fs::exists(dir / "added_tokens.json");
  return config;
}

}  // namespace zt
