// The syntax tree of a chat template and its parser (data/chat_template.h describes the subset).
// Expressions follow Jinja's precedence, lowest first:
//   x if c else y;  or;  and;  not;  == != < > <= >= in, not in;  + -;  ~;  * / // %;
//   unary -;  then postfix: .name  [i]  [a:b:c]  (args)  | filter(args)  is [not] test.
// Statements and syntax outside the subset are refused here, before any row is rendered, with
// the construct and its template position. Filters, tests, functions and methods of any name
// parse, as in Jinja; one the interpreter lacks is an error where a rendering reaches it (so a
// template whose tool-calling branches use tojson still renders plain conversations).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

struct TemplateExpr {
  enum class Kind {
    kLiteral,      // literal
    kList,         // [a, b, ...]: children
    kDict,         // {k: v, ...}: children k0, v0, k1, v1, ...
    kName,         // a variable: name
    kAttribute,    // children[0].name
    kSubscript,    // children[0][children[1]]
    kSlice,        // children[0][children[1]:children[2]:children[3]] (absent parts: nullptr)
    kCall,         // name(children...): a global function (raise_exception, namespace; others are runtime errors)
    kMethodCall,   // children[0].name(children[1...])
    kFilter,       // children[0] | name(children[1...])
    kTest,         // children[0] is [not] name (children[1...]: its arguments)
    kNot,          // not children[0]
    kNegate,       // -children[0]
    kBinary,       // children[0] name children[1]; name: the operator ("and", "or", "in", "not in", "==", "+", ...)
    kConditional,  // children[0] if children[1] else children[2] (children[2] may be nullptr)
  };
  Kind kind = Kind::kLiteral;
  size_t offset = 0;  // position in the template source, for errors
  std::string name;
  nlohmann::json literal;
  bool negated = false;  // kTest: "is not"
  std::vector<std::unique_ptr<TemplateExpr>> children;
  std::vector<std::string> keywords;  // calls, filters, tests: names of the keyword arguments, the last children
};

struct TemplateNode {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // {% if %}{% elif %}{% else %}{% endif %}: branches (condition nullptr for else)
    kFor,     // {% for names in expr [if condition] %} body {% endfor %}
    kSet,     // {% set names[0][.names[1]] = expr %}
  };
  struct Branch {
    std::unique_ptr<TemplateExpr> condition;
    std::vector<TemplateNode> body;
  };
  Kind kind = Kind::kText;
  size_t offset = 0;
  std::string text;                    // kText: the text
  std::vector<std::string> names;      // kFor: the loop variables; kSet: the variable (and an attribute of it)
  std::unique_ptr<TemplateExpr> expr;  // kOutput: the value; kFor: what is iterated; kSet: the value
  std::unique_ptr<TemplateExpr> condition;  // kFor: the loop filter (nullptr for none)
  std::vector<Branch> branches;        // kIf
  std::vector<TemplateNode> body;      // kFor
};

// The template's nodes; a zt::Error "chat template, line L, column C: ..." for a syntax error or
// a construct outside the subset.
std::vector<TemplateNode> parse_chat_template(std::string_view source);

}  // namespace zt
