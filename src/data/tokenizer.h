// The tokenizer interface of `zerotune prep` (and anything that turns text into token ids), and
// the choice of implementation for a model directory: a SentencePiece `tokenizer.model`
// (LLaMA-1/2, Mistral; data/sentencepiece_tokenizer.h) or a byte-level BPE tokenizer
// (data/bpe_tokenizer.h): an HF `tokenizer.json` (GPT-2, OPT, Llama-3, Qwen2;
// data/tokenizer_json.h) or a GPT-2 style `vocab.json` + `merges.txt` (OPT's HF directories;
// data/gpt2_vocab_files.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
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
  // dummy-prefix space is added ("Hi" -> "▁Hi"). For byte-level BPE it is HF tokenizers'
  // encode(text, add_special_tokens=False), added/special-token strings in the text included;
  // no space is added unless the pre-tokenizer has add_prefix_space.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Token ids of `text` continuing an earlier text: the same tokenization without the dummy
  // prefix ("Hi" -> "Hi", " Hi" -> "▁Hi"; byte-level BPE: without add_prefix_space's space,
  // otherwise identical to encode). When the earlier text ends where a token must end anyway
  // (SentencePiece pieces never hold a "▁" after other characters, so before any space; GPT-2's
  // and Llama-3's pre-tokenizer regexes cut before " word"), encode(a) + encode_continuation(b)
  // == encode(a + b).
  virtual std::vector<int32_t> encode_continuation(std::string_view text) const = 0;
  // Token ids of a whole text in which special-token strings ("<s>", "</s>", "<|im_end|>", the
  // added tokens) stand for their tokens: HF's tokenizer(text, add_special_tokens=False), what
  // apply_chat_template(tokenize=True) does with a rendered conversation. Byte-level BPE: encode
  // (it matches added tokens anyway). SentencePiece: the text is cut at the special tokens
  // (the model's unk/bos/eos pieces and the tokens tokenizer_config.json /
  // special_tokens_map.json name, with their lstrip/rstrip flags), and each piece between them is
  // encoded as the start of a text, with the dummy prefix: HF's slow LlamaTokenizer with
  // legacy=True (the 4.40 default), whose fast conversion cuts and prefixes the same way.
  virtual std::vector<int32_t> encode_with_special_tokens(std::string_view text) const = 0;
  // The text of `ids` (pieces joined, "▁" as space, byte pieces and byte-level characters as
  // bytes, special tokens as their text), no dummy prefix removed. The bytes of a multi-byte
  // character split over several ids come back whole when all of them are in `ids`.
  virtual std::string pieces_text(const std::vector<int32_t>& ids) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;  // the token the tokenizer puts before a text; -1 for none
  virtual int64_t eos_id() const = 0;  // -1 when the model has none
  virtual int64_t pad_id() const = 0;  // always a real id (see load_tokenizer)
  virtual const std::string& file_path() const = 0;    // the tokenizer file that was loaded
  virtual const std::string& file_sha256() const = 0;  // sha256 of TokenizerFiles::files, lowercase hex
};

// The text that `ids` add after `context` (HF's decode of the new tokens of a generation):
// pieces_text(context + ids) less its first pieces_text(context) bytes, so that a character whose
// bytes straddle the boundary comes out whole and a SentencePiece word's "▁" becomes the space
// before it (HF's decode drops that space for a completion's first word; the completion is meant to
// be read after the prompt). When the two texts do not share that prefix (the context ends inside
// a character), pieces_text(ids) alone. Always valid UTF-8: bytes that form no character become
// U+FFFD, as in HF's decode.
std::string decode_continuation(const Tokenizer& tokenizer, const std::vector<int32_t>& context,
                                const std::vector<int32_t>& ids);

enum class TokenizerKind { kSentencePiece, kTokenizerJson, kGpt2VocabMerges };

// Which files make a tokenizer. `path` is what file_path() reports; `files` are the files whose
// bytes, concatenated in this order, give file_sha256() (the tokenizer_sha256 of the shards):
// tokenizer.model; tokenizer.json; vocab.json then merges.txt.
struct TokenizerFiles {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  std::string path;
  std::vector<std::string> files;
};

// The tokenizer files of `dir_or_file`, chosen as load_tokenizer chooses; nullopt for a
// directory that holds none (a random model from `zerotune init`) or a path that does not exist.
std::optional<TokenizerFiles> find_tokenizer_files(const std::string& dir_or_file);

// sha256 of the concatenated bytes of files.files (what file_sha256() of that tokenizer gives).
std::string tokenizer_files_sha256(const TokenizerFiles& files);

// Loads `dir_or_model`. A directory: the first of
//   tokenizer.model             SentencePiece. Preferred where a directory has both it and
//                               tokenizer.json (LLaMA-1/2 ship both): zerotune's LLaMA
//                               tokenization stays what it has always been, HF's slow
//                               LlamaTokenizer (HF's AutoTokenizer would take tokenizer.json);
//   tokenizer.json              byte-level BPE (anything else in it is refused, naming the key);
//   vocab.json + merges.txt     GPT-2 style byte-level BPE (OPT).
// A file: tokenizer.json (any *.json but vocab.json) or vocab.json (with merges.txt beside it)
// as above, any other file as a SentencePiece model. Nothing usable is a zt::Error naming the
// path and the files looked for.
//
// SentencePiece's pad id, as an HF LLaMA user sees it, first found of (in the model file's
// directory):
//   config.json "pad_token_id" (an integer in [0, vocab));
//   tokenizer_config.json "pad_token", then special_tokens_map.json "pad_token" (a string or
//   {"content": ...}) when that token is a piece of tokenizer.model;
//   the SentencePiece model's own pad piece (LLaMA's has none);
//   its unk id (LLaMA: 0, the pad_token_id of HF's LLaMA configs); else 0.
// Padding positions are never targets, so any real id is correct; this only picks the usual one.
// Byte-level BPE's pad id: data/bpe_tokenizer.h (choose_pad_id).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_model);

}  // namespace zt
