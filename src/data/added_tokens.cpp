// Finding added tokens in text (data/added_tokens.h). Candidates are indexed by their first byte
// and tried longest first at each position; the Unicode tests (word character, whitespace) are
// PCRE2 classes matched at one position.
#include "data/added_tokens.h"

#include <algorithm>

#include "data/pcre2_regex.h"

namespace zt {
namespace {

// Rust regex's \w (tokenizers' single_word test): Alphabetic, marks, decimal digits, connector
// punctuation and the two join controls.
const Pcre2Regex& word_character() {
  static const Pcre2Regex regex(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", Pcre2Regex::Syntax::kRegex,
                                "added-token word test");
  return regex;
}

// Rust's \s (tokenizers' lstrip/rstrip): the White_Space property.
const Pcre2Regex& whitespace_run() {
  static const Pcre2Regex regex(R"(\p{White_Space}+)", Pcre2Regex::Syntax::kRegex, "added-token whitespace test");
  return regex;
}

// The start of the character that ends just before byte `end` (UTF-8 continuation bytes are
// 10xxxxxx).
size_t previous_char_start(std::string_view text, size_t end) {
  size_t at = end - 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return at;
}

// The start of the whitespace run that ends at `end` (== end when none).
size_t whitespace_run_start(std::string_view text, size_t end) {
  size_t start = end;
  while (start > 0) {
    const size_t at = previous_char_start(text, start);
    if (whitespace_run().match_at(text, at) == std::string_view::npos) break;
    start = at;
  }
  return start;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) {
  for (AddedToken& token : tokens)
    if (!token.content.empty()) tokens_.push_back(std::move(token));
  for (size_t i = 0; i < tokens_.size(); ++i)
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<int>(i));
  for (std::vector<int>& candidates : by_first_byte_)
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int a, int b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

int AddedTokenMatcher::longest_at(std::string_view text, size_t at) const {
  for (int index : by_first_byte_[static_cast<unsigned char>(text[at])])
    if (text.compare(at, tokens_[index].content.size(), tokens_[index].content) == 0) return index;
  return -1;
}

bool AddedTokenMatcher::is_single_word(std::string_view text, size_t begin, size_t end) {
  const bool word_before = begin > 0 && word_character().match_at(text, previous_char_start(text, begin)) != std::string_view::npos;
  const bool word_after = end < text.size() && word_character().match_at(text, end) != std::string_view::npos;
  return !word_before && !word_after;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextPiece>& pieces) const {
  auto add_text = [&](size_t begin, size_t end) {
    if (end > begin) pieces.push_back({std::string(text.substr(begin, end - begin)), -1});
  };
  size_t done = 0;  // text before this is in `pieces`
  size_t at = 0;
  while (at < text.size()) {
    const int index = tokens_.empty() ? -1 : longest_at(text, at);
    if (index < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<size_t>(index)];
    size_t begin = at, end = at + token.content.size();
    at = end;  // the search goes on after this match even when it is discarded below
    if (token.single_word && !is_single_word(text, begin, end)) continue;
    // lstrip may take spaces back to the end of the previous token, not into it.
    if (token.lstrip) begin = std::max(whitespace_run_start(text, begin), done);
    if (token.rstrip) {
      const size_t run_end = whitespace_run().match_at(text, end);
      if (run_end != std::string_view::npos) end = run_end;
      at = end;
    }
    add_text(done, begin);
    pieces.push_back({std::string(text.substr(begin, end - begin)), token.id});
    done = end;
  }
  add_text(done, text.size());
}

}  // namespace zt
