// A byte-level BPE tokenizer (GPT-2, OPT, Llama-3, Qwen2) as zerotune's Tokenizer, assembled
// from its parts by the loaders (data/tokenizer_json.h, data/gpt2_vocab_files.h). Encoding a
// text is HF tokenizers 0.19's pipeline without BOS/EOS:
//   1. added tokens with normalized=false are found in the raw text (data/added_tokens.h);
//   2. each piece between them is normalized (NFC ... when the tokenizer has a normalizer) and
//      the added tokens with normalized=true are found in it;
//   3. each remaining piece is pre-tokenized into byte-level words
//      (data/byte_level_pre_tokenizer.h), and each word goes through the BPE model
//      (data/bpe_model.h).
// encode_continuation differs only when the pre-tokenizer adds a prefix space (add_prefix_space):
// a continuation's first piece gets none, as that piece is not the start of HF's whole text.
// pieces_text maps token characters back to bytes (added tokens as their content): the bytes of
// the text, multi-byte characters rebuilt whatever tokens they were split into.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/added_tokens.h"
#include "data/bpe_model.h"
#include "data/byte_level_pre_tokenizer.h"
#include "data/hf_tokenizer_config.h"
#include "data/tokenizer.h"
#include "data/unicode_normalizer.h"

namespace zt {

struct BpeTokenizerSpec {
  std::string path;    // file_path(): tokenizer.json, or vocab.json of a vocab.json + merges.txt pair
  std::string sha256;  // file_sha256()
  BpeModelSpec model;
  std::vector<AddedToken> added_tokens;
  std::vector<NormalForm> normalizers;  // applied in order
  ByteLevelPreTokenizer pre_tokenizer;
  int64_t bos_id = -1;  // the token the tokenizer puts before a text, -1 for none
  int64_t eos_id = -1;
  int64_t pad_id = 0;
};

// The id of `content` among the spec's added tokens, else in its vocabulary.
std::optional<int32_t> find_token_id(const BpeTokenizerSpec& spec, std::string_view content);

// Adds what `config` names (added_tokens_decoder, the named special tokens, the additional
// special tokens) to spec.added_tokens unless a token with that content is there already, as
// transformers' fast tokenizer does when it loads. A named token that is neither an added token
// nor in the vocabulary is a zt::Error (zerotune does not grow vocabularies); `where` names the
// directory for it.
void add_config_tokens(BpeTokenizerSpec& spec, const HfTokenizerConfig& config, const std::string& where);

// pad id, first found of: config.json pad_token_id (an id of the tokenizer), the pad_token's id,
// the EOS id (DeepSpeed-Chat pads OPT with EOS), 0. Padding is never a target, so any real id
// works.
int64_t choose_pad_id(const BpeTokenizerSpec& spec, const HfTokenizerConfig& config);

// 1 + the largest id of the vocabulary and the added tokens.
int64_t spec_vocab_size(const BpeTokenizerSpec& spec);

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeTokenizerSpec spec);

  std::vector<int32_t> encode(std::string_view text) const override { return run(text, false); }
  std::vector<int32_t> encode_continuation(std::string_view text) const override { return run(text, true); }
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override { return run(text, false); }
  std::string pieces_text(const std::vector<int32_t>& ids) const override;

  int64_t vocab_size() const override { return vocab_size_; }
  int64_t bos_id() const override { return bos_id_; }
  int64_t eos_id() const override { return eos_id_; }
  int64_t pad_id() const override { return pad_id_; }
  const std::string& file_path() const override { return path_; }
  const std::string& file_sha256() const override { return sha256_; }

 private:
  std::vector<int32_t> run(std::string_view text, bool continuation) const;

  std::string path_;
  std::string sha256_;
  BpeModel model_;
  AddedTokenMatcher raw_tokens_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_tokens_;  // added tokens with normalized = true
  std::unordered_map<int32_t, std::string> added_content_;  // id -> content, for pieces_text
  std::vector<UnicodeNormalizer> normalizers_;
  ByteLevelPreTokenizer pre_tokenizer_;
  int64_t vocab_size_ = 0;
  int64_t bos_id_ = -1, eos_id_ = -1, pad_id_ = 0;
};

}  // namespace zt
