// zerotune's interpreter of HF chat templates (the `chat_template` of a model's
// tokenizer_config.json): the Jinja subset that the LLaMA-2, LLaMA-3, Mistral and Qwen2/ChatML
// templates use, rendered as transformers' apply_chat_template renders them (jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, raise_exception(message)).
//
// The subset:
//   text, {{ expr }}, {# comments #}, whitespace control {%- -%} {{- -}} {%+
//   {% if %}/{% elif %}/{% else %}/{% endif %}, {% for a[, b] in expr [if condition] %}/{% endfor %}
//   with loop.index0/index/first/last/length/revindex/revindex0 (other loop attributes are
//   refused), {% set name = expr %} (scoped as in Jinja: a set inside a loop body is local to
//   that iteration)
//   literals: 'strings' "with escapes", integers, floats, true/false/none (and True/False/None),
//   [lists], {dicts}; variables; x.attr; x['key']; x[i] on lists and strings (negative too);
//   x[a:b:c] on lists
//   operators: + - * / // % ~ == != < > <= >= in, not in, and, or, not, x if c else y
//   tests: is [not] defined/undefined/none/string/number/integer/float/boolean/mapping/sequence/
//   iterable/true/false/even/odd, eq/equalto/ne/in with an argument
//   filters: trim([chars]), length, count, lower, upper, default/d, string, first, last, join
//   string methods: strip/lstrip/rstrip([chars]), lower(), upper(), startswith(s), endswith(s),
//   replace(a, b); dict method get(key[, default]); the functions raise_exception(message) and
//   namespace(name=value, ...) with {% set ns.name = expr %}
// Statements and syntax outside it (macros, {% set %}...{% endset %}, tuples, ...) are refused
// when the template is parsed, naming the construct and its line and column. Filters, tests,
// functions and methods of other names, keyword arguments and loops over dicts parse, as Jinja parses them, and are an error naming them and their position when a
// rendering reaches them: the tool-calling branches of Llama-3.1+ and Qwen2.5 templates (tojson)
// do not stop plain conversations. Values follow Python's rules where templates
// rely on them (True == 1, 'a' != false, str() of True/None/numbers, strip's whitespace); an
// undefined variable prints as nothing and is false, and using it otherwise (undefined.x,
// undefined + 'a') is an error, as in Jinja. Newlines are normalized as Jinja's lexer does.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/chat_template_syntax.h"

namespace zt {

class ChatTemplate {
 public:
  // Parses `source` (its newlines normalized as Jinja does: data/chat_template_lexer.h); a syntax error or an unsupported construct is a zt::Error
  // "chat template, line L, column C: ..." (prefixed with `origin`, e.g. the file it came from).
  ChatTemplate(std::string source, const std::string& origin);

  // The template rendered with `variables` (a JSON object: messages, add_generation_prompt,
  // bos_token, ...). raise_exception(message) in the template is a zt::Error
  // "the chat template refused the conversation: <message>"; any other runtime error names its
  // template position.
  std::string render(const nlohmann::json& variables) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<TemplateNode> nodes_;
};

}  // namespace zt
