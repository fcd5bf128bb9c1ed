// Tests of zerotune's chat-template interpreter (data/chat_template.h) and the chat-data helpers
// (data/chat_data.h) that need no tokenizer. The expected renderings were produced by jinja2
// 3.1.4 with transformers' environment (ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True)) on the same variables; tests/oracle/test_chat_data.py compares whole
// published templates with transformers itself.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat_data.h"
#include "data/chat_template.h"
#include "test_util.h"

namespace {

using Json = nlohmann::json;

Json variables() {
  return Json::parse(R"({"messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "Hi"},
                                      {"role": "assistant", "content": "Yo\n"}],
                         "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true})");
}

std::string render(const std::string& source) { return zt::ChatTemplate(source, "test").render(variables()); }

}  // namespace

BOOST_AUTO_TEST_SUITE(chat_template)

BOOST_AUTO_TEST_CASE(expressions_follow_python_and_jinja) {
  BOOST_CHECK_EQUAL(render("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 'a' ~ 1 ~ none ~ true }}"),
                    "7|3|-4|2|3.5|a1NoneTrue");
  BOOST_CHECK_EQUAL(render("{{ True == 1 }}|{{ 'a' != false }}|{{ none is none }}|{{ x is defined }}|"
                           "{{ messages is not string }}|{{ 2 > 1 and 'b' >= 'a' }}"),
                    "True|True|True|False|True|True");
  BOOST_CHECK_EQUAL(render("{{ messages[1:] | length }}|{{ messages[-1].role }}|{{ messages[::-1][0]['role'] }}|"
                           "{{ messages[5] is defined }}|{{ (messages | last).content | trim }}"),
                    "2|assistant|assistant|False|Yo");
  BOOST_CHECK_EQUAL(render("{{ 'ab' in 'cabd' }}|{{ 'user' in ['user', 'x'] }}|{{ 'role' in messages[0] }}|"
                           "{{ 'z' not in 'abc' }}|{{ ([1, 2] + [3]) | length }}"),
                    "True|True|True|True|3");
  BOOST_CHECK_EQUAL(render("{{ 'y' if add_generation_prompt else 'n' }}|{{ 'y' if not add_generation_prompt }}|"
                           "{{ undefined_thing | default('d') }}|{{ '' | default('e', true) }}|"
                           "{{ messages[0].get('role') }}{{ messages[0].get('nope', 'N') }}"),
                    "y||d|e|systemN");
}

BOOST_AUTO_TEST_CASE(strings_escapes_filters_and_methods) {
  BOOST_CHECK_EQUAL(render(R"({{ '  x y \n' | trim }}|{{ ' \t x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a '.lstrip() }}.|)"
                           R"({{ ' a '.rstrip() }}|{{ 'AbC' | lower }}{{ 'abc'.upper() }})"),
                    "x y|x|a|a .| a|abcABC");
  BOOST_CHECK_EQUAL(render(R"({{ 'x\ty\u00e9\x41\\n' }}|{{ "q'" }}|{{ 'a' 'b' }}|{{ 1.5 * 2 }}|{{ 3 * 'ab' }}|)"
                           R"({{ ['a', 'b'] | join('-') }}|{{ 'a-b'.replace('-', '+') }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }})"),
                    "x\ty\xC3\xA9" "A\\n|q'|ab|3.0|ababab|a-b|a+b|TrueTrue");
  // Python's str.strip() takes Unicode whitespace (no-break space, ideographic space); length counts characters.
  BOOST_CHECK_EQUAL(render(R"({{ '\u00a0 x \u3000' | trim }}|{{ '\u00e9' | length }}|{{ 'h\u00e9!'[1] }}{{ 'ab'[-1] }})"),
                    "x|1|\xC3\xA9" "b");
}

BOOST_AUTO_TEST_CASE(statements_loops_and_scopes) {
  BOOST_CHECK_EQUAL(render("{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
                           "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}"),
                    "01TrueFalse332;12FalseFalse321;23FalseTrue310;");
  // A set inside a loop body is local to the iteration, as in Jinja (hence namespace() there).
  BOOST_CHECK_EQUAL(render("{% set x = 1 %}{% for m in messages %}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}"),
                    "11,11,11,1");
  BOOST_CHECK_EQUAL(render("{% if false %}a{% elif 0 %}b{% elif [] %}c{% elif 'z' %}d{% else %}e{% endif %}|"
                           "{% if '' %}f{% else %}g{% endif %}"),
                    "d|g");
}

BOOST_AUTO_TEST_CASE(whitespace_control_trim_and_lstrip_blocks) {
  BOOST_CHECK_EQUAL(render("A\n  {% if true %}\n    B\n  {% endif %}\nC {{ 'v' }}\n{# comment #}\nD\n    {%+ if true %}E{% endif %}\n"
                           "{%- if true -%}\n  F  \n{%- endif %}\n G {{- ' H ' -}} I"),
                    "A\n    B\nC v\nD\n    EF G H I");
}

BOOST_AUTO_TEST_CASE(newlines_are_normalized_and_one_trailing_newline_dropped) {
  // jinja2: "\r\n" and "\r" read as "\n", and keep_trailing_newline=False drops the last one.
  BOOST_CHECK_EQUAL(render("a\r\nb\rc{{ 'x' }}\n"), "a\nb\ncx");
  BOOST_CHECK_EQUAL(render("a\n\n"), "a\n");
  BOOST_CHECK_EQUAL(render("{{ 'xxaxx' | trim('x') }}"), "a");
}

BOOST_AUTO_TEST_CASE(raise_exception_and_runtime_errors_name_their_cause) {
  zt::test::check_error_mentions([] { render("{{ raise_exception('Only user and assistant roles!') }}"); },
                                 {"the chat template refused the conversation: Only user and assistant roles!"});
  zt::test::check_error_mentions([] { render("ok\n{{ nothing.role }}"); }, {"line 2, column", "'role' of an undefined value"});
  zt::test::check_error_mentions([] { render("{{ 'a' + 1 }}"); }, {"line 1, column 8", "unsupported operand types for +: 'str' and 'int'"});
  zt::test::check_error_mentions([] { render("{{ messages[0] }}"); }, {"printing a dict is not supported"});
  zt::test::check_error_mentions([] { render("{% for c in 'abc' %}{% endfor %}"); }, {"for loop over a str", "lists only"});
}

BOOST_AUTO_TEST_CASE(unsupported_statements_and_syntax_are_refused_when_parsed) {
  const auto refused = [](const std::string& source, std::vector<std::string> parts) {
    parts.insert(parts.begin(), "test: chat template, line");
    zt::test::check_error_mentions([&] { zt::ChatTemplate(source, "test"); }, parts);
  };
  refused("Hi\n  {% macro m() %}{% endmacro %}", {"line 2, column 6", "{% macro %} is not supported", "{% for name in ... %}"});
  refused("{% set x %}a{% endset %}", {"block assignments"});
  refused("{% if x %}a", {"{% if %} is never closed with {% endif %}"});
  refused("{{ x", {"a {{ tag is never closed with }}"});
  refused("{% endfor %}", {"{% endfor %} without its opening tag"});
  refused("{{ 'abc }}", {"a string literal is never closed"});
  refused("{{ 1 < 2 < 3 }}", {"chained comparisons"});
  refused("{{ (1, 2) }}", {"tuples are not supported"});
  refused("{{ f(a=1, 2) }}", {"a positional argument after a keyword argument"});
  refused("{% for m in messages %}{{ loop.previtem }}{% endfor %}", {"column 32", "loop.previtem is not supported"});
}

// Filters, tests, functions and methods zerotune lacks parse (a template's tool-calling branch may
// use them) and are an error, with their position, only where a rendering reaches them.
BOOST_AUTO_TEST_CASE(unsupported_filters_tests_functions_fail_where_reached) {
  BOOST_CHECK_EQUAL(render("{% if tools is defined %}{{ tools | tojson(indent=4) }}{{ range(2) }}"
                           "{% for k, v in tools | items %}{% endfor %}{% set ns.i = 1 %}{% endif %}ok"),
                    "ok");
  zt::test::check_error_mentions([] { render("{{ messages | tojson }}"); }, {"column 15", "the filter 'tojson' is not supported"});
  zt::test::check_error_mentions([] { render("{{ messages | tojson(indent=4) }}"); }, {"keyword arguments (tojson(indent=...))"});
  zt::test::check_error_mentions([] { render("{{ range(3) }}"); }, {"the function range() is not supported"});
  zt::test::check_error_mentions([] { render("{% set ns = {} %}{% set ns.i = 1 %}"); }, {"cannot set ns.i: ns is no namespace() object"});
  zt::test::check_error_mentions([] { render("{{ 3 is divisibleby(3) }}"); }, {"the test 'is divisibleby' is not supported"});
  zt::test::check_error_mentions([] { render("{{ 'a'.split() }}"); }, {"the method split() of a str is not supported"});
  zt::test::check_error_mentions([] { render("{{ messages[0].items() }}"); }, {"the method items() of a dict is not supported"});
  zt::test::check_error_mentions([] { render("{{ {'a': 1} }}"); }, {"printing a dict is not supported"});
}

BOOST_AUTO_TEST_CASE(loop_filters_unpacking_dicts_and_tests_with_arguments) {
  BOOST_CHECK_EQUAL(render("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{{ loop.last }};{% endfor %}"),
                    "1userFalse;2assistantTrue;");
  BOOST_CHECK_EQUAL(render("{% for a, b in [['x', 1], ['y', 2]] %}{{ a }}{{ b }}{% endfor %}|{{ {'k': 'v'}['k'] }}|"
                           "{{ 2 is even }}{{ 3 is odd }}{{ 'a' is equalto 'a' }}{{ 1 is ne 2 }}{{ 'user' is in ['user'] }}"),
                    "x1y2|v|TrueTrueTrueTrueTrue");
  zt::test::check_error_mentions([] { render("{% for a, b in messages %}{% endfor %}"); }, {"cannot unpack a dict into the 2 loop variables"});
  // A namespace is one object: a set inside a loop reaches it (a plain set there would not).
  BOOST_CHECK_EQUAL(render("{% set ns = namespace(count=0, last='') %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
                           "{% set ns.last = m.role %}{% endfor %}{{ ns.count }} {{ ns.last }}"),
                    "3 assistant");
}

BOOST_AUTO_TEST_CASE(conversation_checks) {
  BOOST_CHECK_EQUAL(zt::bad_conversation_reason(Json::parse(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])")), "");
  BOOST_CHECK_EQUAL(zt::bad_conversation_reason(Json::parse(R"("text")")), "'messages' is not a list (string)");
  BOOST_CHECK_EQUAL(zt::bad_conversation_reason(Json::array()), "empty conversation ('messages' is [])");
  BOOST_CHECK_EQUAL(zt::bad_conversation_reason(Json::parse(R"([{"role": "user"}])")), "a message has no 'content'");
  BOOST_CHECK_EQUAL(zt::bad_conversation_reason(Json::parse(R"([{"role": "user", "content": null}])")),
                    "a message's 'content' is not a string");
  BOOST_CHECK_EQUAL(zt::bad_conversation_reason(Json::parse(R"([{"role": "user", "content": "a"}])")),
                    "no assistant turn (nothing to learn)");
}

BOOST_AUTO_TEST_CASE(template_sources) {
  zt::test::TempDir dir;
  zt::test::check_error_mentions([&] { zt::load_chat_template(dir.path.string(), ""); }, {"tokenizer_config.json", "no chat_template", "--chat-template FILE"});
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  zt::test::check_error_mentions([&] { zt::load_chat_template(dir.path.string(), ""); }, {"has no chat_template"});
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ 1 }}"}]})");
  BOOST_CHECK_EQUAL(zt::load_chat_template(dir.path.string(), "").render(Json::object()), "D1");
  dir.write("other.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  zt::test::check_error_mentions([&] { zt::load_chat_template(dir.path.string(), dir.file("other.json")); }, {"tool_use", "none named \"default\""});
  const std::string jinja = dir.write("template.jinja", "J{{ eos_token }}");
  BOOST_CHECK_EQUAL(zt::load_chat_template(dir.path.string(), jinja).render(Json{{"eos_token", "</s>"}}), "J</s>");
  zt::test::check_error_mentions([&] { zt::load_chat_template(dir.path.string(), dir.file("missing.jinja")); }, {"--chat-template", "no such file"});
  const std::string broken = dir.write("broken.jinja", "{% while %}");
  zt::test::check_error_mentions([&] { zt::load_chat_template(dir.path.string(), broken); }, {"broken.jinja: chat template, line 1, column 4", "{% while %}"});
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// A tokenizer with one token per byte, except the pairs ":h" and "|u", each one token: enough to
// put a token across the start and the end of an assistant turn.
class PairTokenizer final : public zt::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      const std::string_view pair = text.substr(i, 2);
      if (pair == ":h" || pair == "|u") {
        ids.push_back(pair == ":h" ? 256 : 257);
        ++i;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  }
  std::vector<int32_t> encode_continuation(std::string_view text) const override { return encode(text); }
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override { return encode(text); }
  std::string pieces_text(const std::vector<int32_t>&) const override { return ""; }
  int64_t vocab_size() const override { return 258; }
  int64_t bos_id() const override { return -1; }
  int64_t eos_id() const override { return -1; }
  int64_t pad_id() const override { return 0; }
  const std::string& file_path() const override { return path_; }
  const std::string& file_sha256() const override { return path_; }

 private:
  std::string path_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(chat_template)

// The masking rule of data/chat_data.h: an assistant turn's targets run from the end of the
// rendering before it (with the generation prompt) to the end of the rendering through it; a
// token across the turn's start is a target, one across its end is not.
BOOST_AUTO_TEST_CASE(assistant_turn_masks_and_straddling_tokens) {
  const zt::ChatTemplate chat_template(
      "{% for m in messages %}{{ m.role[0] if m.role != 'assistant' else 'a' }}:{{ m.content }}|{% endfor %}"
      "{% if add_generation_prompt %}a{% endif %}",
      "test");
  const Json messages = Json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "hi"},
                                        {"role": "user", "content": "r"}, {"role": "assistant", "content": "ok"}])");
  const PairTokenizer tokenizer;
  const zt::ChatSample chat = zt::build_chat_sample(chat_template, Json::object(), tokenizer, messages);
  BOOST_CHECK_EQUAL(chat.text, "u:q|a:hi|u:r|a:ok|");
  const std::vector<int32_t> want_tokens = {'u', ':', 'q', '|', 'a', 256, 'i', 257, ':', 'r', '|', 'a', ':', 'o', 'k', '|'};
  BOOST_CHECK(chat.sample.tokens == want_tokens);
  // Turn 1 is ":hi|" after "u:q|a": ":h" straddles its start (a target), "|u" its end (not one).
  // Turn 2 is ":ok|", every token inside.
  const std::vector<uint8_t> want_mask = {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1};
  BOOST_CHECK(chat.sample.loss_mask == want_mask);
  // A template that renders the earlier turns differently once later ones follow is refused.
  const zt::ChatTemplate unstable("{% for m in messages %}{{ m.content }}{{ '.' if loop.last else ',' }}{% endfor %}", "test");
  zt::test::check_error_mentions([&] { zt::build_chat_sample(unstable, Json::object(), tokenizer, messages); },
                                 {"does not render the conversation up to message 2", "as the start of the whole conversation"});
}

BOOST_AUTO_TEST_SUITE_END()
