// Lexing a chat template (data/chat_template_lexer.h), one pass: text up to the next tag (with the
// whitespace rules applied), then the tag's tokens up to its end delimiter.
#include "data/chat_template_lexer.h"

#include <algorithm>
#include <cstring>

namespace zt {
namespace {

using Kind = TemplateToken::Kind;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(source) {}

  std::vector<TemplateToken> run() {
    while (position_ < source_.size()) {
      const size_t tag = find_tag(position_);
      std::string text(source_.substr(position_, tag - position_));
      if (tag == source_.size()) {
        push_text(std::move(text), position_);
        break;
      }
      const char type = source_[tag + 1];  // '{', '%' or '#'
      const char control = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (control == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (control != '+' && type != '{') {
        strip_line_start(text);
      }
      push_text(std::move(text), position_);
      const size_t inside = tag + 2 + ((control == '-' || control == '+') ? 1 : 0);
      if (type == '#') skip_comment(tag, inside);
      else lex_tag(type, tag, inside);
    }
    tokens_.push_back({Kind::kEnd, "", 0, 0.0, source_.size()});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t at = source_.find('{', from); at != std::string_view::npos; at = source_.find('{', at + 1))
      if (at + 1 < source_.size() && std::strchr("{%#", source_[at + 1]) != nullptr) return at;
    return source_.size();
  }

  // lstrip_blocks: only spaces/tabs between the line's start and the tag are removed.
  void strip_line_start(std::string& text) const {
    const size_t newline = text.rfind('\n');
    const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if (line_start == 0 && !line_starting_) return;
    if (line_start == text.size()) return;
    for (size_t i = line_start; i < text.size(); ++i)
      if (!is_space(text[i])) return;
    text.erase(line_start);
  }

  void push_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({Kind::kText, std::move(text), 0, 0.0, offset});
  }

  // After a tag's end delimiter at `end` (one past it): the "-" rule (all whitespace after it is
  // skipped) or trim_blocks (one newline).
  void finish_tag(size_t end, bool strip_after, bool trim_newline) {
    if (strip_after) {
      while (end < source_.size() && is_space(source_[end])) ++end;
    } else if (trim_newline && end < source_.size() && source_[end] == '\n') {
      ++end;
    }
    line_starting_ = end > 0 && source_[end - 1] == '\n';
    position_ = end;
  }

  void skip_comment(size_t tag, size_t inside) {
    const size_t close = source_.find("#}", inside);
    if (close == std::string_view::npos) template_error(source_, tag, "a comment {# is never closed with #}");
    const bool strip_after = close > inside && source_[close - 1] == '-';
    finish_tag(close + 2, strip_after, true);
  }

  void lex_tag(char type, size_t tag, size_t inside) {
    const bool block = type == '%';
    tokens_.push_back({block ? Kind::kBlockBegin : Kind::kVariableBegin, "", 0, 0.0, tag});
    const char close = block ? '%' : '}';
    size_t at = inside;
    int braces = 0;  // open { of dict literals, so that "}}" inside one is no tag end
    while (true) {
      while (at < source_.size() && is_space(source_[at])) ++at;
      if (at >= source_.size()) template_error(source_, tag, block ? "a {% tag is never closed with %}" : "a {{ tag is never closed with }}");
      const bool dash = source_[at] == '-' && at + 2 < source_.size() && source_[at + 1] == close && source_[at + 2] == '}';
      if (braces == 0 && (dash || (source_[at] == close && at + 1 < source_.size() && source_[at + 1] == '}'))) {
        tokens_.push_back({block ? Kind::kBlockEnd : Kind::kVariableEnd, "", 0, 0.0, at});
        finish_tag(at + (dash ? 3 : 2), dash, block);
        return;
      }
      at = lex_token(at, braces);
    }
  }

  // One token starting at `at`; returns where the next one may start.
  size_t lex_token(size_t at, int& braces) {
    const char c = source_[at];
    if (is_name_start(c)) {
      size_t end = at;
      while (end < source_.size() && (is_name_start(source_[end]) || is_digit(source_[end]))) ++end;
      tokens_.push_back({Kind::kName, std::string(source_.substr(at, end - at)), 0, 0.0, at});
      return end;
    }
    if (is_digit(c)) return lex_number(at);
    if (c == '\'' || c == '"') return lex_string(at);
    static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                             "<",  ">",  "(",  ")",  "[",  "]",  "{", "}", ".", ",", ":", "|", "="};
    for (const char* op : kOperators) {
      const size_t length = std::strlen(op);
      if (source_.compare(at, length, op) != 0) continue;
      if (c == '{') ++braces;
      if (c == '}') --braces;
      tokens_.push_back({Kind::kOperator, op, 0, 0.0, at});
      return at + length;
    }
    template_error(source_, at, "unexpected character '", c, "' in a tag");
  }

  size_t lex_number(size_t at) {
    size_t end = at;
    while (end < source_.size() && (is_digit(source_[end]) || source_[end] == '_')) ++end;
    const bool fraction = end + 1 < source_.size() && source_[end] == '.' && is_digit(source_[end + 1]);
    if (fraction)
      for (++end; end < source_.size() && is_digit(source_[end]);) ++end;
    std::string digits(source_.substr(at, end - at));
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    TemplateToken token{fraction ? Kind::kFloat : Kind::kInteger, digits, 0, 0.0, at};
    if (fraction) token.number = std::stod(digits);
    else token.integer = std::stoll(digits);
    tokens_.push_back(std::move(token));
    return end;
  }

  // A quoted string with Python's escapes (Jinja decodes literals with "unicode-escape").
  size_t lex_string(size_t at) {
    const char quote = source_[at];
    std::string value;
    size_t i = at + 1;
    for (; i < source_.size() && source_[i] != quote; ++i) {
      if (source_[i] != '\\' || i + 1 >= source_.size()) {
        value += source_[i];
        continue;
      }
      i = unescape(i, value);
    }
    if (i >= source_.size()) template_error(source_, at, "a string literal is never closed");
    tokens_.push_back({Kind::kString, std::move(value), 0, 0.0, at});
    return i + 1;
  }

  // The escape at source_[backslash]; returns the index of its last character.
  size_t unescape(size_t backslash, std::string& value) const {
    const char e = source_[backslash + 1];
    static const std::string_view kSimple = "ntr\\'\"abfv0";
    static const char kValues[] = {'\n', '\t', '\r', '\\', '\'', '"', '\a', '\b', '\f', '\v', '\0'};
    const size_t simple = kSimple.find(e);
    if (simple != std::string_view::npos) {
      value += kValues[simple];
      return backslash + 1;
    }
    const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits == 0 || backslash + 1 + digits >= source_.size()) {  // unknown escape: kept as written
      value += '\\';
      return backslash;
    }
    const std::string hex(source_.substr(backslash + 2, digits));
    if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      template_error(source_, backslash, "bad \\", e, " escape in a string literal");
    append_utf8(value, static_cast<uint32_t>(std::stoul(hex, nullptr, 16)));
    return backslash + 1 + digits;
  }

  std::string_view source_;
  std::vector<TemplateToken> tokens_;
  size_t position_ = 0;
  bool line_starting_ = true;  // the last tag (with what it consumed after it) ended a line: lstrip_blocks' rule
};

}  // namespace

std::string normalize_template_newlines(std::string_view source) {
  std::string text;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') {
      text += source[i];
      continue;
    }
    text += '\n';
    if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::vector<TemplateToken> lex_chat_template(std::string_view source) { return Lexer(source).run(); }

std::string template_position(std::string_view source, size_t offset) {
  offset = std::min(offset, source.size());
  const size_t line = 1 + static_cast<size_t>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
  const size_t newline = offset == 0 ? std::string_view::npos : source.rfind('\n', offset - 1);
  const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
  return cat("line ", line, ", column ", offset - line_start + 1);
}

}  // namespace zt
