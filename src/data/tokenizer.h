// The tokenizer interface of `zerotune prep` (and anything that turns text into token ids),
// with its one implementation so far: a SentencePiece `tokenizer.model` (LLaMA-1/2, Mistral)
// through libsentencepiece. BPE `tokenizer.json` models are not supported yet.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text` as the start of a text, without BOS/EOS. For SentencePiece this is
  // exactly SentencePieceProcessor::Encode, i.e. HF's LlamaTokenizer (legacy, the 4.40 default)
  // `tokenize` + `convert_tokens_to_ids` for text without special-token strings: the model's
  // dummy-prefix space is added ("Hi" -> "▁Hi").
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Token ids of `text` continuing an earlier text: the same tokenization without the dummy
  // prefix ("Hi" -> "Hi", " Hi" -> "▁Hi"). When the earlier text ends where a token must end
  // anyway (SentencePiece pieces never hold a "▁" after other characters, so before any space),
  // encode(a) + encode_continuation(b) == encode(a + b).
  virtual std::vector<int32_t> encode_continuation(std::string_view text) const = 0;
  // The text of `ids` (pieces joined, "▁" as space, byte pieces as bytes), no dummy prefix removed.
  virtual std::string pieces_text(const std::vector<int32_t>& ids) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;  // -1 when the model has none
  virtual int64_t eos_id() const = 0;  // -1 when the model has none
  virtual int64_t pad_id() const = 0;  // always a real id (see load_tokenizer)
  virtual const std::string& file_path() const = 0;    // the tokenizer file that was loaded
  virtual const std::string& file_sha256() const = 0;  // its sha256, lowercase hex
};

// Loads `dir_or_model`: a model directory holding tokenizer.model, or a path to a .model file.
// A missing tokenizer.model is a zt::Error naming the path it looked for.
//
// pad id, as an HF LLaMA user sees it, first found of (in the model file's directory):
//   config.json "pad_token_id" (an integer in [0, vocab));
//   tokenizer_config.json "pad_token", then special_tokens_map.json "pad_token" (a string or
//   {"content": ...}) when that token is a piece of tokenizer.model;
//   the SentencePiece model's own pad piece (LLaMA's has none);
//   its unk id (LLaMA: 0, the pad_token_id of HF's LLaMA configs); else 0.
// Padding positions are never targets, so any real id is correct; this only picks the usual one.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_model);

}  // namespace zt
