// What the HF json files beside a BPE tokenizer say about its special tokens, read the way
// transformers 4.40's from_pretrained resolves them:
//   tokenizer_config.json   bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
//                           mask_token, additional_special_tokens (a string, or an AddedToken
//                           object {"content", "lstrip", "rstrip", "single_word", "normalized"}),
//                           added_tokens_decoder {"id": AddedToken}, add_bos_token,
//                           add_prefix_space;
//   special_tokens_map.json the same token keys; they replace tokenizer_config.json's values,
//                           except when tokenizer_config.json has added_tokens_decoder (then
//                           transformers does not read this file);
//   config.json             pad_token_id, eos_token_id (an integer, or a list: its first).
// A token given as a string has every flag false (transformers' AddedToken(token, special=True));
// given as an object, its flags are the object's (special is true for the named tokens).
// Missing files and keys are simply absent; a file that is not JSON, or a key of the wrong type,
// is a zt::Error naming the file and the key.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/added_tokens.h"

namespace zt {

struct HfTokenizerConfig {
  std::map<std::string, AddedToken> named;       // "bos_token", "eos_token", ... -> token (id unset)
  std::vector<AddedToken> additional_special;    // additional_special_tokens (ids unset)
  std::vector<AddedToken> added_tokens_decoder;  // tokenizer_config.json's, with their ids
  std::optional<bool> add_bos_token;
  std::optional<bool> add_prefix_space;
  std::optional<int64_t> config_pad_token_id;
  std::optional<int64_t> config_eos_token_id;
  bool has_added_tokens_file = false;  // added_tokens.json (the legacy list of added tokens)

  // The content of a named token ("eos_token" -> "</s>"), or "" when it is not named.
  std::string content(const std::string& key) const;
};

HfTokenizerConfig read_hf_tokenizer_config(const std::filesystem::path& dir);

}  // namespace zt
