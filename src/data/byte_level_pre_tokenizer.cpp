// The byte-level pre-tokenizer chain (data/byte_level_pre_tokenizer.h).
#include "data/byte_level_pre_tokenizer.h"

#include "data/byte_level.h"

namespace zt {

const char* const kGpt2PreTokenizerRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// Split(Isolated) of every piece by `regex`: matches and the stretches between them, empty
// pieces dropped (as tokenizers drops them).
std::vector<std::string> split_isolated(const Pcre2Regex& regex, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& piece : pieces) {
    size_t done = 0;
    for (const TextSpan& match : regex.find_all(piece)) {
      if (match.begin > done) out.push_back(piece.substr(done, match.begin - done));
      if (match.end > match.begin) out.push_back(piece.substr(match.begin, match.end - match.begin));
      done = match.end;
    }
    if (done < piece.size()) out.push_back(piece.substr(done));
  }
  return out;
}

}  // namespace

void ByteLevelPreTokenizer::add_split(Pcre2Regex regex) { splits_.push_back(std::move(regex)); }

void ByteLevelPreTokenizer::set_byte_level(bool add_prefix_space, bool use_regex) {
  add_prefix_space_ = add_prefix_space;
  use_regex_ = use_regex;
}

void ByteLevelPreTokenizer::pre_tokenize(std::string_view text, bool no_prefix_space_on_first,
                                         std::vector<std::string>& words) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{std::string(text)};
  for (const Pcre2Regex& regex : splits_) pieces = split_isolated(regex, pieces);
  if (add_prefix_space_) {
    for (size_t i = 0; i < pieces.size(); ++i)
      if (!(i == 0 && no_prefix_space_on_first) && pieces[i][0] != ' ') pieces[i].insert(0, 1, ' ');
  }
  if (use_regex_) pieces = split_isolated(gpt2_regex_, pieces);
  for (const std::string& piece : pieces) words.push_back(byte_level_encode(piece));
}

}  // namespace zt
