// Does a tokenized dataset belong to a model? `train` refuses data made with another tokenizer
// (or a larger vocabulary) than the model's, and `inspect --tokenizer` refuses to decode with a
// tokenizer the data was not made with, each naming both sides.
#pragma once
#include <cstdint>
#include <string>

#include "data/token_shards.h"

namespace zt {

// Fails (naming data_dir and model_dir) when
//   - the data's vocab_size is larger than model_vocab_size (ids the embedding cannot look up), or
//   - model_dir holds a tokenizer (tokenizer.model, tokenizer.json or vocab.json + merges.txt,
//     chosen as load_tokenizer chooses) whose sha256 differs from attrs.tokenizer_sha256.
// A model directory without a tokenizer (a random model from `zerotune init`) is accepted.
void check_data_matches_model(const ShardAttributes& attrs, const std::string& data_dir, const std::string& model_dir,
                              int64_t model_vocab_size);

// Fails when tokenizer_sha256 (of the file tokenizer_path) differs from attrs.tokenizer_sha256,
// showing both hashes and both paths.
void check_tokenizer_matches_data(const ShardAttributes& attrs, const std::string& data_dir,
                                  const std::string& tokenizer_path, const std::string& tokenizer_sha256);

}  // namespace zt
