// The data-vs-model checks (see data_model_check.h). The tokenizer is identified by the sha256
// of its files, exactly as `zerotune prep` records it (Tokenizer::file_sha256 =
// tokenizer_files_sha256 of the files load_tokenizer reads).
#include "data/data_model_check.h"

#include <filesystem>

#include "core/error.h"
#include "data/tokenizer.h"

namespace zt {

void check_tokenizer_matches_data(const ShardAttributes& attrs, const std::string& data_dir,
                                  const std::string& tokenizer_path, const std::string& tokenizer_sha256) {
  ZT_CHECK(tokenizer_sha256 == attrs.tokenizer_sha256, "the data ", data_dir, " was tokenized with another tokenizer than ",
           tokenizer_path, ": the data's tokenizer_sha256 is ", attrs.tokenizer_sha256, ", the sha256 of ", tokenizer_path,
           " is ", tokenizer_sha256, " (run `zerotune prep` again with this tokenizer)");
}

void check_data_matches_model(const ShardAttributes& attrs, const std::string& data_dir, const std::string& model_dir,
                              int64_t model_vocab_size) {
  ZT_CHECK(attrs.vocab_size <= model_vocab_size, data_dir, ": the data's vocab_size ", attrs.vocab_size,
           " exceeds the model's vocab_size ", model_vocab_size, " (", model_dir,
           "): the data was tokenized for another model");
  // The model directory's tokenizer, chosen as load_tokenizer chooses; none: e.g. a random model
  // from `zerotune init`.
  const std::optional<TokenizerFiles> tokenizer = find_tokenizer_files(model_dir);
  if (!tokenizer) return;
  check_tokenizer_matches_data(attrs, data_dir, tokenizer->path, tokenizer_files_sha256(*tokenizer));
}

}  // namespace zt
