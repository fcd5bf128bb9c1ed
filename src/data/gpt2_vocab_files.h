// Loading a GPT-2 style tokenizer directory, vocab.json + merges.txt without tokenizer.json
// (OPT's HF directories, GPT-2's), into a BpeTokenizer (data/bpe_tokenizer.h), as transformers
// 4.40's GPT2TokenizerFast builds it from the slow GPT2Tokenizer's files:
//   vocab.json              {token: id}
//   merges.txt              "#version: ..." first line (skipped), then one "left right" merge
//                           per line in rank order (empty lines are skipped)
//   pre-tokenizer           ByteLevel(add_prefix_space from tokenizer_config.json, default
//                           false), GPT-2's regex
//   special tokens          data/hf_tokenizer_config.h; unk, bos and eos default to
//                           "<|endoftext|>" (GPT2Tokenizer's defaults) when no file names them
//   BOS                     the bos_token when tokenizer_config.json says add_bos_token (OPT:
//                           "</s>", id 2); none otherwise. EOS: the eos_token.
// file_path() is vocab.json; file_sha256() is the sha256 of vocab.json's bytes followed by
// merges.txt's bytes. A directory with added_tokens.json (a legacy list of added tokens) is
// refused (not read here).
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace zt {

std::unique_ptr<Tokenizer> load_gpt2_vocab_files(const std::string& dir);

}  // namespace zt
