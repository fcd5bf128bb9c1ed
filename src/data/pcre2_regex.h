// A compiled PCRE2 pattern over UTF-8 text with Unicode properties (PCRE2_UTF | PCRE2_UCP: \p{L},
// \p{N}, \s and case folding over all of Unicode), the regex engine of the byte-level BPE
// pre-tokenizers (data/byte_level_pre_tokenizer.h) and of the added-token checks
// (data/added_tokens.h). HF tokenizers uses Oniguruma; the patterns tokenizers ship (GPT-2's,
// Llama-3's, Qwen2's) mean the same in both engines.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// [begin, end) byte offsets into a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Pcre2Regex {
 public:
  enum class Syntax { kRegex, kLiteral };  // kLiteral: the pattern is a plain string (PCRE2_LITERAL)

  // Compiles `pattern`. A pattern PCRE2 refuses is a zt::Error that starts with `context` (the
  // file and key it came from) and gives PCRE2's message and the offset in the pattern.
  Pcre2Regex(const std::string& pattern, Syntax syntax, const std::string& context);
  ~Pcre2Regex();
  Pcre2Regex(Pcre2Regex&& other) noexcept;
  Pcre2Regex& operator=(Pcre2Regex&& other) noexcept;
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Every match in `text`, left to right, not overlapping (the search goes on where the last
  // match ended; after an empty match, one character later). Text that is not valid UTF-8 is a
  // zt::Error.
  std::vector<TextSpan> find_all(std::string_view text) const;

  // The end of a match that starts exactly at byte `at` of `text`, or `std::string_view::npos`
  // when there is none there (an anchored match; `at` must be at a character start).
  size_t match_at(std::string_view text, size_t at) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;  // pcre2_code and its match data; keeps pcre2.h out of this header
  // The first match at or after `from`, or false.
  bool search(std::string_view text, size_t from, unsigned options, TextSpan& found) const;

  std::string pattern_;
  std::string context_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace zt
