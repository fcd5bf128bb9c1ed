// Choosing and loading a model directory's tokenizer (data/tokenizer.h): which files are there
// decides the implementation.
#include "data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/sha256.h"
#include "data/gpt2_vocab_files.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer_json.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

TokenizerFiles files_of(TokenizerKind kind, const fs::path& path) {
  TokenizerFiles files{kind, path.string(), {path.string()}};
  if (kind == TokenizerKind::kGpt2VocabMerges) files.files.push_back((path.parent_path() / "merges.txt").string());
  return files;
}

}  // namespace

std::optional<TokenizerFiles> find_tokenizer_files(const std::string& dir_or_file) {
  const fs::path given(dir_or_file);
  std::error_code error;
  if (!fs::exists(given, error)) return std::nullopt;
  if (!fs::is_directory(given, error)) {
    if (given.filename() == "vocab.json") return files_of(TokenizerKind::kGpt2VocabMerges, given);
    if (given.extension() == ".json") return files_of(TokenizerKind::kTokenizerJson, given);
    return files_of(TokenizerKind::kSentencePiece, given);
  }
  if (fs::exists(given / "tokenizer.model", error)) return files_of(TokenizerKind::kSentencePiece, given / "tokenizer.model");
  if (fs::exists(given / "tokenizer.json", error)) return files_of(TokenizerKind::kTokenizerJson, given / "tokenizer.json");
  if (fs::exists(given / "vocab.json", error) && fs::exists(given / "merges.txt", error))
    return files_of(TokenizerKind::kGpt2VocabMerges, given / "vocab.json");
  return std::nullopt;
}

std::string tokenizer_files_sha256(const TokenizerFiles& files) {
  if (files.files.size() == 1) return sha256_file_hex(files.files[0]);
  Sha256 hash;
  for (const std::string& path : files.files) {
    std::ifstream in(path, std::ios::binary);
    ZT_CHECK(in, path, ": cannot open for reading");
    char buffer[1 << 16];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
      hash.update(std::string_view(buffer, static_cast<size_t>(in.gcount())));
    ZT_CHECK(!in.bad(), path, ": read error");
  }
  return hash.hex_digest();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_model) {
  const fs::path given(dir_or_model);
  ZT_CHECK(fs::exists(given), "--tokenizer ", dir_or_model, ": no such file or directory");
  const std::optional<TokenizerFiles> files = find_tokenizer_files(dir_or_model);
  if (!files) {
    const bool has_vocab = fs::exists(given / "vocab.json");
    fail(dir_or_model, ": no tokenizer found: zerotune reads tokenizer.model (SentencePiece: LLaMA-1/2, Mistral), "
         "tokenizer.json (byte-level BPE: GPT-2, OPT, Llama-3, Qwen2) or vocab.json + merges.txt (GPT-2 style BPE: OPT)",
         has_vocab ? "; this directory has vocab.json but no merges.txt" : "");
  }
  switch (files->kind) {
    case TokenizerKind::kSentencePiece: return load_sentencepiece_tokenizer(files->path);
    case TokenizerKind::kTokenizerJson: return load_tokenizer_json(files->path);
    case TokenizerKind::kGpt2VocabMerges: return load_gpt2_vocab_files(fs::path(files->path).parent_path().string());
  }
  fail("unknown tokenizer kind");
}

std::string decode_continuation(const Tokenizer& tokenizer, const std::vector<int32_t>& context,
                                const std::vector<int32_t>& ids) {
  std::vector<int32_t> all = context;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string before = tokenizer.pieces_text(context), whole = tokenizer.pieces_text(all);
  const std::string text =
      whole.compare(0, before.size(), before) == 0 ? whole.substr(before.size()) : tokenizer.pieces_text(ids);
  // Bytes that are no UTF-8 (a character the token limit cut, a lone byte token) become U+FFFD, as
  // HF's decode (bytes.decode(errors="replace")) makes them: nlohmann's replacing serializer.
  return nlohmann::json::parse(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

}  // namespace zt
