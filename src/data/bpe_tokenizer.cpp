// The byte-level BPE tokenizer (data/bpe_tokenizer.h): the encoding pipeline, decoding, and the
// special-token bookkeeping both loaders share.
#include "data/bpe_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "data/byte_level.h"

namespace zt {

std::optional<int32_t> find_token_id(const BpeTokenizerSpec& spec, std::string_view content) {
  for (const AddedToken& token : spec.added_tokens)
    if (token.content == content) return token.id;
  const auto found = spec.model.vocab.find(content);
  if (found == spec.model.vocab.end()) return std::nullopt;
  return found->second;
}

void add_config_tokens(BpeTokenizerSpec& spec, const HfTokenizerConfig& config, const std::string& where) {
  auto present = [&](const std::string& content) {
    return std::any_of(spec.added_tokens.begin(), spec.added_tokens.end(),
                       [&](const AddedToken& token) { return token.content == content; });
  };
  for (const AddedToken& token : config.added_tokens_decoder)
    if (!present(token.content)) spec.added_tokens.push_back(token);
  auto add_named = [&](AddedToken token, const std::string& key) {
    if (token.content.empty() || present(token.content)) return;
    const std::optional<int32_t> id = find_token_id(spec, token.content);
    ZT_CHECK(id.has_value(), where, ": the ", key, " '", token.content,
             "' is neither in the vocabulary nor an added token (transformers would append it as a new token; "
             "zerotune does not grow vocabularies: add it to the tokenizer's files)");
    token.id = *id;
    spec.added_tokens.push_back(std::move(token));
  };
  for (const auto& [key, token] : config.named) add_named(token, key);
  for (const AddedToken& token : config.additional_special) add_named(token, "additional special token");
}

int64_t spec_vocab_size(const BpeTokenizerSpec& spec) {
  int64_t largest = -1;
  for (const auto& [token, id] : spec.model.vocab) largest = std::max<int64_t>(largest, id);
  for (const AddedToken& token : spec.added_tokens) largest = std::max<int64_t>(largest, token.id);
  return largest + 1;
}

int64_t choose_pad_id(const BpeTokenizerSpec& spec, const HfTokenizerConfig& config) {
  const int64_t vocab = spec_vocab_size(spec);
  if (config.config_pad_token_id && *config.config_pad_token_id >= 0 && *config.config_pad_token_id < vocab)
    return *config.config_pad_token_id;
  if (const std::optional<int32_t> id = find_token_id(spec, config.content("pad_token")); id && !config.content("pad_token").empty())
    return *id;
  if (spec.eos_id >= 0) return spec.eos_id;
  return 0;
}

BpeTokenizer::BpeTokenizer(BpeTokenizerSpec spec)
    : path_(std::move(spec.path)),
      sha256_(std::move(spec.sha256)),
      model_(std::move(spec.model)),
      pre_tokenizer_(std::move(spec.pre_tokenizer)),
      bos_id_(spec.bos_id),
      eos_id_(spec.eos_id),
      pad_id_(spec.pad_id) {
  std::vector<AddedToken> raw, normalized;
  vocab_size_ = model_.max_id() + 1;
  for (const AddedToken& token : spec.added_tokens) {
    ZT_CHECK(token.id >= 0, path_, ": the added token '", token.content, "' has the id ", token.id);
    (token.normalized ? normalized : raw).push_back(token);
    added_content_.emplace(token.id, token.content);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{token.id} + 1);
  }
  raw_tokens_ = AddedTokenMatcher(std::move(raw));
  normalized_tokens_ = AddedTokenMatcher(std::move(normalized));
  for (NormalForm form : spec.normalizers) normalizers_.emplace_back(form);
  for (int64_t id : {bos_id_, eos_id_, pad_id_})
    ZT_CHECK(id < vocab_size_, path_, ": special token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
}

std::vector<int32_t> BpeTokenizer::run(std::string_view text, bool continuation) const {
  std::vector<TextPiece> raw_pieces;  // added tokens of the raw text, and the text between them
  raw_tokens_.split(text, raw_pieces);
  std::vector<TextPiece> pieces;      // ... with the normalized text and its added tokens
  for (TextPiece& piece : raw_pieces) {
    if (piece.token_id >= 0) {
      pieces.push_back(std::move(piece));
      continue;
    }
    std::string normalized = std::move(piece.text);
    for (const UnicodeNormalizer& normalizer : normalizers_) normalized = normalizer.normalize(normalized);
    normalized_tokens_.split(normalized, pieces);
  }

  std::vector<int32_t> ids;
  std::vector<std::string> words;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].token_id >= 0) {
      ids.push_back(pieces[i].token_id);
      continue;
    }
    words.clear();
    pre_tokenizer_.pre_tokenize(pieces[i].text, continuation && i == 0, words);
    for (const std::string& word : words) model_.tokenize(word, ids);
  }
  return ids;
}

std::string BpeTokenizer::pieces_text(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (const auto added = added_content_.find(id); added != added_content_.end()) {
      text += added->second;
      continue;
    }
    const std::string* token = model_.token(id);
    ZT_CHECK(token != nullptr, path_, ": token id ", id, " is not in the vocabulary [0, ", vocab_size_, ")");
    const size_t before = text.size();
    if (!byte_level_decode(*token, text)) {  // not a byte-level string: show it as it is
      text.resize(before);
      text += *token;
    }
  }
  return text;
}

}  // namespace zt
