// The lexer of zerotune's chat-template interpreter (data/chat_template.h): a Jinja template's
// source -> text pieces and the tokens inside its tags, with Jinja's whitespace rules as
// transformers' apply_chat_template sets them (trim_blocks and lstrip_blocks on):
//   {%- / {{- / {#-   remove all whitespace before the tag; -%} / -}} / -#} all whitespace after;
//   trim_blocks       the first newline after a block tag (%}) or a comment (#}) is removed;
//   lstrip_blocks     spaces and tabs from the start of a line up to a block tag or comment are
//                     removed ({%+ keeps them); not before a {{ }} tag.
// String literals take Python's escapes (\n, \t, \\, \', \", \xhh, \uXXXX ...), as Jinja's do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace zt {

struct TemplateToken {
  enum class Kind {
    kText,           // template text outside tags (text)
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,           // identifier (text)
    kString,         // string literal (text: its value, escapes resolved)
    kInteger,        // integer literal (integer)
    kFloat,          // float literal (number)
    kOperator,       // + - * / // % ~ == != < > <= >= ( ) [ ] { } . , : | = ** (text)
    kEnd,            // end of the template
  };
  Kind kind = Kind::kEnd;
  std::string text;
  int64_t integer = 0;
  double number = 0.0;
  size_t offset = 0;  // where the token starts in the template source
};

// The source as Jinja lexes it: "\r\n" and "\r" become "\n", and one newline at the very end
// is dropped (keep_trailing_newline=False). Parse and report positions on this text.
std::string normalize_template_newlines(std::string_view source);

std::vector<TemplateToken> lex_chat_template(std::string_view source);

// "line L, column C" of byte `offset` of `source` (1-based).
std::string template_position(std::string_view source, size_t offset);

// Throws zt::Error "chat template, line L, column C: <parts>".
template <class... Parts>
[[noreturn]] void template_error(std::string_view source, size_t offset, const Parts&... parts) {
  fail("chat template, ", template_position(source, offset), ": ", parts...);
}

}  // namespace zt
