// The SentencePiece tokenizer (LLaMA-1/2, Mistral): a `tokenizer.model` through libsentencepiece,
// with the dummy-prefix rule of data/tokenizer.h's encode/encode_continuation and the pad-id
// lookup described at load_tokenizer.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace zt {

// Loads the SentencePiece model file `model_path`; the HF json files of its directory give the
// pad id. A file that is not a SentencePiece model is a zt::Error naming it.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path);

}  // namespace zt
