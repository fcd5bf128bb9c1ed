// Loading an HF tokenizers `tokenizer.json` that holds a byte-level BPE tokenizer (GPT-2, OPT,
// Llama-3, Qwen2 ...) into a BpeTokenizer (data/bpe_tokenizer.h). What is read:
//   model           type "BPE": vocab, merges ("a b" strings or ["a", "b"] pairs), ignore_merges,
//                   unk_token, fuse_unk; dropout, a continuing_subword_prefix, an
//                   end_of_word_suffix and byte_fallback are refused (no byte-level tokenizer
//                   uses them)
//   added_tokens    [{id, content, single_word, lstrip, rstrip, normalized, special}]
//   normalizer      null, NFC, NFD, NFKC, NFKD, or a Sequence of those
//   pre_tokenizer   ByteLevel, or a Sequence of Split(Regex or String, behavior Isolated,
//                   invert false) steps ending with one ByteLevel
//   post_processor  which BOS / EOS a text gets: TemplateProcessing (at most one special token
//                   before and one after $A), RobertaProcessing (cls, sep), ByteLevel or null
//                   (none), or a Sequence of those
// The decoder is not read: byte-level tokenizers decode by the byte table, which is what
// pieces_text does. Anything else (WordPiece, Unigram, a Metaspace pre-tokenizer, ...) is a
// zt::Error naming the file, the key and the value.
// Special tokens named by the HF json files beside it (data/hf_tokenizer_config.h) are added as
// transformers adds them. EOS, when the post-processor adds none: the eos_token of those files,
// else config.json's eos_token_id, else none.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace zt {

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);

}  // namespace zt
