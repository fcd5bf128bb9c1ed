// PCRE2 patterns (data/pcre2_regex.h): compiled once with PCRE2_UTF | PCRE2_UCP and JIT-compiled
// when the library can; each search makes its own match data, so one pattern serves any thread.
#include "data/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace zt {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(code, buffer, sizeof buffer);
  return length < 0 ? cat("PCRE2 error ", code) : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
}

struct MatchData {
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    ZT_CHECK(data != nullptr, "out of memory for PCRE2 match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* data;
};

}  // namespace

struct Pcre2Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Pcre2Regex::Pcre2Regex(const std::string& pattern, Syntax syntax, const std::string& context)
    : pattern_(pattern), context_(context), compiled_(std::make_unique<Compiled>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (syntax == Syntax::kLiteral) options |= PCRE2_LITERAL;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                                  &error_offset, nullptr);
  ZT_CHECK(compiled_->code != nullptr, context, ": the regex '", pattern, "' does not compile (PCRE2, UTF + Unicode properties): ",
           pcre2_message(error_code), " at offset ", error_offset);
  // JIT is only a speed-up: without it (a platform PCRE2's JIT does not support) the
  // interpreter gives the same matches.
  (void)pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Pcre2Regex::~Pcre2Regex() = default;
Pcre2Regex::Pcre2Regex(Pcre2Regex&& other) noexcept = default;
Pcre2Regex& Pcre2Regex::operator=(Pcre2Regex&& other) noexcept = default;

bool Pcre2Regex::search(std::string_view text, size_t from, unsigned options, TextSpan& found) const {
  MatchData match(compiled_->code);
  const int result = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from, options,
                                 match.data, nullptr);
  if (result == PCRE2_ERROR_NOMATCH) return false;
  if (result <= PCRE2_ERROR_UTF8_ERR1 && result >= PCRE2_ERROR_UTF8_ERR21)
    fail(context_, ": a text to tokenize is not valid UTF-8 (", pcre2_message(result), " at byte ",
         pcre2_get_startchar(match.data), ")");
  ZT_CHECK(result >= 0, context_, ": matching the regex '", pattern_, "' failed: ", pcre2_message(result));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
  found = {ovector[0], ovector[1]};
  return true;
}

std::vector<TextSpan> Pcre2Regex::find_all(std::string_view text) const {
  std::vector<TextSpan> matches;
  size_t from = 0;
  unsigned options = 0;  // the first search checks the UTF-8 of the whole text, later ones need not
  TextSpan found;
  while (from <= text.size() && search(text, from, options, found)) {
    matches.push_back(found);
    options = PCRE2_NO_UTF_CHECK;
    if (found.end > found.begin) {
      from = found.end;
      continue;
    }
    // An empty match: go on after the next whole character (UTF-8 continuation bytes are 10xxxxxx).
    from = found.end + 1;
    while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  }
  return matches;
}

size_t Pcre2Regex::match_at(std::string_view text, size_t at) const {
  TextSpan found;
  if (!search(text, at, PCRE2_ANCHORED, found)) return std::string_view::npos;
  return found.end;
}

}  // namespace zt
