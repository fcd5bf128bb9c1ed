// Parsing a chat template (data/chat_template_syntax.h): recursive descent over the lexer's tokens.
#include <algorithm>
#include <initializer_list>

#include "data/chat_template_lexer.h"
#include "data/chat_template_syntax.h"

namespace zt {
namespace {

using Kind = TemplateToken::Kind;
using ExprPtr = std::unique_ptr<TemplateExpr>;

constexpr const char* kSupportedStatements =
    "zerotune's chat-template interpreter knows {% if %}/{% elif %}/{% else %}/{% endif %}, "
    "{% for name in ... %}/{% endfor %} and {% set name = ... %}";

ExprPtr make_expr(TemplateExpr::Kind kind, size_t offset, std::string name = {}) {
  auto expr = std::make_unique<TemplateExpr>();
  expr->kind = kind;
  expr->offset = offset;
  expr->name = std::move(name);
  return expr;
}

bool is_known_loop_attribute(const std::string& name) {
  for (const char* known : {"index0", "index", "first", "last", "length", "revindex", "revindex0"})
    if (name == known) return true;
  return false;
}

ExprPtr make_binary(std::string op, size_t offset, ExprPtr left, ExprPtr right) {
  ExprPtr expr = make_expr(TemplateExpr::Kind::kBinary, offset, std::move(op));
  expr->children.push_back(std::move(left));
  expr->children.push_back(std::move(right));
  return expr;
}

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source), tokens_(lex_chat_template(source)) {}

  std::vector<TemplateNode> parse_template() {
    std::vector<TemplateNode> nodes = parse_body({});
    if (peek().kind != Kind::kEnd) unexpected_statement();
    return nodes;
  }

 private:
  const TemplateToken& peek(size_t ahead = 0) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }
  const TemplateToken& next() { return tokens_[std::min(at_++, tokens_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const { return peek(ahead).kind == Kind::kOperator && peek(ahead).text == op; }
  bool is_name(const char* name, size_t ahead = 0) const { return peek(ahead).kind == Kind::kName && peek(ahead).text == name; }

  [[noreturn]] void error_here(const std::string& message) const { template_error(source_, peek().offset, message); }

  void expect_op(const char* op) {
    if (!is_op(op)) error_here(cat("expected '", op, "'", describe_current()));
    ++at_;
  }
  void expect_kind(Kind kind, const char* what) {
    if (peek().kind != kind) error_here(cat("expected ", what, describe_current()));
    ++at_;
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Kind::kName) error_here(cat("expected ", what, describe_current()));
    return next().text;
  }
  std::string describe_current() const {
    const TemplateToken& token = peek();
    switch (token.kind) {
      case Kind::kName: case Kind::kOperator: return cat(", found '", token.text, "'");
      case Kind::kString: return ", found a string";
      case Kind::kInteger: case Kind::kFloat: return ", found a number";
      case Kind::kBlockEnd: return ", found the end of the tag (%})";
      case Kind::kVariableEnd: return ", found the end of the tag (}})";
      case Kind::kEnd: return ", found the end of the template";
      default: return "";
    }
  }

  // Nodes up to a {% tag %} whose keyword is in `stops` (left unread) or the end of the template.
  std::vector<TemplateNode> parse_body(std::initializer_list<const char*> stops) {
    std::vector<TemplateNode> nodes;
    while (peek().kind != Kind::kEnd) {
      const TemplateToken& token = peek();
      if (token.kind == Kind::kText) {
        TemplateNode node;
        node.offset = token.offset;
        node.text = next().text;
        nodes.push_back(std::move(node));
      } else if (token.kind == Kind::kVariableBegin) {
        TemplateNode node;
        node.kind = TemplateNode::Kind::kOutput;
        node.offset = next().offset;
        node.expr = parse_expression();
        expect_kind(Kind::kVariableEnd, "the end of the {{ }} tag");
        nodes.push_back(std::move(node));
      } else {
        const std::string keyword = peek(1).kind == Kind::kName ? peek(1).text : "";
        if (std::any_of(stops.begin(), stops.end(), [&](const char* stop) { return keyword == stop; })) break;
        nodes.push_back(parse_statement());
      }
    }
    return nodes;
  }

  [[noreturn]] void unexpected_statement() {
    ++at_;  // the {%
    const std::string keyword = peek().kind == Kind::kName ? peek().text : "";
    if (keyword == "elif" || keyword == "else" || keyword == "endif" || keyword == "endfor")
      error_here(cat("{% ", keyword, " %} without its opening tag (or not supported here: ", kSupportedStatements, ")"));
    error_here(cat("{% ", keyword.empty() ? "..." : keyword, " %} is not supported: ", kSupportedStatements));
  }

  TemplateNode parse_statement() {
    const std::string keyword = peek(1).kind == Kind::kName ? peek(1).text : "";
    if (keyword == "if") return parse_if();
    if (keyword == "for") return parse_for();
    if (keyword == "set") return parse_set();
    unexpected_statement();
  }

  // {% keyword %} with nothing else in the tag.
  void expect_bare_tag(const char* keyword) {
    expect_kind(Kind::kBlockBegin, "{%");
    if (!is_name(keyword)) error_here(cat("expected {% ", keyword, " %}", describe_current()));
    ++at_;
    expect_kind(Kind::kBlockEnd, "the end of the tag (%})");
  }

  TemplateNode parse_if() {
    TemplateNode node;
    node.kind = TemplateNode::Kind::kIf;
    node.offset = next().offset;  // {%
    ++at_;                        // if
    while (true) {
      TemplateNode::Branch branch;
      branch.condition = parse_expression();
      expect_kind(Kind::kBlockEnd, "the end of the tag (%})");
      branch.body = parse_body({"elif", "else", "endif"});
      node.branches.push_back(std::move(branch));
      if (peek().kind == Kind::kEnd) template_error(source_, node.offset, "{% if %} is never closed with {% endif %}");
      if (is_name("elif", 1)) {
        at_ += 2;
        continue;
      }
      if (is_name("else", 1)) {
        expect_bare_tag("else");
        TemplateNode::Branch otherwise;
        otherwise.body = parse_body({"endif"});
        node.branches.push_back(std::move(otherwise));
        if (peek().kind == Kind::kEnd) template_error(source_, node.offset, "{% if %} is never closed with {% endif %}");
      }
      expect_bare_tag("endif");
      return node;
    }
  }

  TemplateNode parse_for() {
    TemplateNode node;
    node.kind = TemplateNode::Kind::kFor;
    node.offset = next().offset;  // {%
    ++at_;                        // for
    node.names.push_back(expect_name("a loop variable after 'for'"));
    while (is_op(",")) {
      ++at_;
      node.names.push_back(expect_name("a loop variable after ','"));
    }
    if (!is_name("in")) error_here(cat("expected 'in'", describe_current()));
    ++at_;
    node.expr = parse_expression(false);
    if (is_name("if")) {  // {% for x in y if condition %}: only the items for which it holds
      ++at_;
      node.condition = parse_expression(false);
    }
    if (is_name("recursive")) error_here("recursive loops are not supported");
    expect_kind(Kind::kBlockEnd, "the end of the tag (%})");
    node.body = parse_body({"endfor", "else"});
    if (peek().kind == Kind::kEnd) template_error(source_, node.offset, "{% for %} is never closed with {% endfor %}");
    if (is_name("else", 1)) error_here("{% for %} ... {% else %} is not supported");
    expect_bare_tag("endfor");
    return node;
  }

  TemplateNode parse_set() {
    TemplateNode node;
    node.kind = TemplateNode::Kind::kSet;
    node.offset = next().offset;  // {%
    ++at_;                        // set
    node.names.push_back(expect_name("a variable name after 'set'"));
    if (is_op(".")) {  // {% set ns.attr = ... %}: an attribute of a namespace() object
      ++at_;
      node.names.push_back(expect_name("an attribute name after '.'"));
    }
    if (is_op(",")) error_here("setting several variables at once is not supported");
    if (peek().kind == Kind::kBlockEnd) error_here("block assignments ({% set x %}...{% endset %}) are not supported");
    expect_op("=");
    node.expr = parse_expression();
    expect_kind(Kind::kBlockEnd, "the end of the tag (%})");
    return node;
  }

  // ---- expressions, lowest precedence first

  ExprPtr parse_expression(bool with_conditional = true) {
    ExprPtr value = parse_or();
    if (!with_conditional || !is_name("if")) return value;
    const size_t offset = next().offset;
    ExprPtr conditional = make_expr(TemplateExpr::Kind::kConditional, offset);
    conditional->children.push_back(std::move(value));
    conditional->children.push_back(parse_or());
    ExprPtr otherwise;
    if (is_name("else")) {
      ++at_;
      otherwise = parse_expression();
    }
    conditional->children.push_back(std::move(otherwise));
    return conditional;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const size_t offset = next().offset;
      left = make_binary("or", offset, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const size_t offset = next().offset;
      left = make_binary("and", offset, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (!is_name("not")) return parse_compare();
    ExprPtr expr = make_expr(TemplateExpr::Kind::kNot, next().offset);
    expr->children.push_back(parse_not());
    return expr;
  }

  // The comparison operator at the current token ("" for none): ==, !=, <, >, <=, >=, in, not in.
  std::string comparison_here() const {
    for (const char* op : {"==", "!=", "<", ">", "<=", ">="})
      if (is_op(op)) return op;
    if (is_name("in")) return "in";
    if (is_name("not") && is_name("in", 1)) return "not in";
    return "";
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    std::string op = comparison_here();
    if (op.empty()) return left;
    const size_t offset = peek().offset;
    at_ += op == "not in" ? 2 : 1;
    left = make_binary(op, offset, std::move(left), parse_math1());
    if (!comparison_here().empty()) error_here("chained comparisons (a < b < c) are not supported; use 'and'");
    return left;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const TemplateToken& op = next();
      left = make_binary(op.text, op.offset, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const size_t offset = next().offset;
      left = make_binary("~", offset, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const TemplateToken& op = next();
      left = make_binary(op.text, op.offset, std::move(left), parse_unary());
    }
    if (is_op("**")) error_here("the power operator ** is not supported");
    return left;
  }

  ExprPtr parse_unary() {
    ExprPtr expr;
    if (is_op("-")) {
      expr = make_expr(TemplateExpr::Kind::kNegate, next().offset);
      expr->children.push_back(parse_unary_operand());
    } else {
      if (is_op("+")) ++at_;
      expr = parse_unary_operand();
    }
    return parse_filters_and_tests(std::move(expr));
  }

  ExprPtr parse_unary_operand() { return parse_postfix(parse_primary()); }

  ExprPtr parse_primary() {
    const TemplateToken& token = peek();
    if (token.kind == Kind::kName) return parse_name();
    if (token.kind == Kind::kString) {
      ExprPtr expr = make_expr(TemplateExpr::Kind::kLiteral, token.offset);
      std::string value;
      while (peek().kind == Kind::kString) value += next().text;  // adjacent literals join, as in Python
      expr->literal = value;
      return expr;
    }
    if (token.kind == Kind::kInteger || token.kind == Kind::kFloat) {
      ExprPtr expr = make_expr(TemplateExpr::Kind::kLiteral, token.offset);
      expr->literal = token.kind == Kind::kInteger ? nlohmann::json(token.integer) : nlohmann::json(token.number);
      ++at_;
      return expr;
    }
    if (is_op("(")) {
      ++at_;
      ExprPtr inner = parse_expression();
      if (is_op(",")) error_here("tuples are not supported");
      expect_op(")");
      return inner;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    error_here(cat("expected a value", describe_current()));
  }

  ExprPtr parse_name() {
    const TemplateToken& token = next();
    ExprPtr expr = make_expr(TemplateExpr::Kind::kLiteral, token.offset);
    if (token.text == "true" || token.text == "True") expr->literal = true;
    else if (token.text == "false" || token.text == "False") expr->literal = false;
    else if (token.text == "none" || token.text == "None") expr->literal = nullptr;
    else if (is_op("(")) return parse_call(token);
    else expr = make_expr(TemplateExpr::Kind::kName, token.offset, token.text);
    return expr;
  }

  // name(args): raise_exception is the one function zerotune has; others (namespace, range,
  // strftime_now, ...) parse and are an error where a rendering reaches them.
  ExprPtr parse_call(const TemplateToken& function) {
    ExprPtr call = make_expr(TemplateExpr::Kind::kCall, function.offset, function.text);
    parse_arguments(*call);
    return call;
  }

  // {key: value, ...}: children alternate keys and values.
  ExprPtr parse_dict() {
    ExprPtr dict = make_expr(TemplateExpr::Kind::kDict, next().offset);
    while (!is_op("}")) {
      dict->children.push_back(parse_expression());
      expect_op(":");
      dict->children.push_back(parse_expression());
      if (!is_op(",")) break;
      ++at_;
    }
    expect_op("}");
    return dict;
  }

  ExprPtr parse_list() {
    ExprPtr list = make_expr(TemplateExpr::Kind::kList, next().offset);
    while (!is_op("]")) {
      list->children.push_back(parse_expression());
      if (!is_op(",")) break;
      ++at_;
    }
    expect_op("]");
    return list;
  }

  // (arg, ..., name=arg, ...) appended to expr's children; the keyword names go to expr.keywords
  // (they name the last children).
  void parse_arguments(TemplateExpr& expr) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Kind::kName && is_op("=", 1)) {
        expr.keywords.push_back(next().text);
        ++at_;  // =
      } else if (!expr.keywords.empty()) {
        error_here("a positional argument after a keyword argument");
      }
      expr.children.push_back(parse_expression());
      if (!is_op(",")) break;
      ++at_;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      if (is_op(".")) {
        ++at_;
        const size_t offset = peek().offset;
        std::string name = expect_name("an attribute name after '.'");
        const bool call = is_op("(");
        const bool loop_attribute = expr->kind == TemplateExpr::Kind::kName && expr->name == "loop" && !call;
        if (loop_attribute && !is_known_loop_attribute(name))
          template_error(source_, offset, "loop.", name, " is not supported (zerotune knows loop.index0, index, first, "
                         "last, length, revindex, revindex0)");
        ExprPtr access = make_expr(call ? TemplateExpr::Kind::kMethodCall : TemplateExpr::Kind::kAttribute, offset, std::move(name));
        access->children.push_back(std::move(expr));
        if (call) parse_arguments(*access);
        expr = std::move(access);
      } else if (is_op("[")) {
        expr = parse_subscript(std::move(expr));
      } else if (is_op("(")) {
        error_here("calling a value is not supported (only raise_exception(...) and methods of strings and dicts)");
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const size_t offset = next().offset;  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) error_here("a slice has at most two ':'");
        ++at_;
        continue;
      }
      if (parts[colons]) error_here(cat("expected ']'", describe_current()));
      parts[colons] = parse_expression();
      if (is_op(",")) error_here("tuple subscripts are not supported");
    }
    expect_op("]");
    if (colons == 0 && !parts[0]) template_error(source_, offset, "an empty subscript []");
    ExprPtr expr = make_expr(colons == 0 ? TemplateExpr::Kind::kSubscript : TemplateExpr::Kind::kSlice, offset);
    expr->children.push_back(std::move(object));
    expr->children.push_back(std::move(parts[0]));
    if (colons > 0) {
      expr->children.push_back(std::move(parts[1]));
      expr->children.push_back(std::move(parts[2]));
    }
    return expr;
  }

  // Filters and tests of any name parse (Jinja's grammar); one zerotune lacks is an error where a
  // rendering reaches it.
  ExprPtr parse_filters_and_tests(ExprPtr expr) {
    while (true) {
      if (is_op("|")) {
        ++at_;
        const size_t offset = peek().offset;
        ExprPtr filter = make_expr(TemplateExpr::Kind::kFilter, offset, expect_name("a filter name after '|'"));
        filter->children.push_back(std::move(expr));
        if (is_op("(")) parse_arguments(*filter);
        expr = std::move(filter);
      } else if (is_name("is")) {
        ++at_;
        const bool negated = is_name("not") && (++at_, true);
        const size_t offset = peek().offset;
        ExprPtr test = make_expr(TemplateExpr::Kind::kTest, offset, expect_name("a test name after 'is'"));
        test->negated = negated;
        test->children.push_back(std::move(expr));
        parse_test_argument(*test);
        expr = std::move(test);
      } else {
        return expr;
      }
    }
  }

  // A test's argument, as Jinja reads it: "(args)" or one value ("is equalto 3", "is sameas none").
  void parse_test_argument(TemplateExpr& test) {
    if (is_op("(")) {
      parse_arguments(test);
      return;
    }
    const TemplateToken& token = peek();
    const bool value_follows = token.kind == Kind::kString || token.kind == Kind::kInteger || token.kind == Kind::kFloat ||
                               is_op("[") || is_op("{") ||
                               (token.kind == Kind::kName && !is_name("else") && !is_name("or") && !is_name("and") &&
                                !is_name("if") && !is_name("in") && !is_name("not"));
    if (!value_follows) return;
    if (is_name("is")) error_here("tests cannot be chained (x is a is b)");
    test.children.push_back(parse_postfix(parse_primary()));
  }

  std::string_view source_;
  std::vector<TemplateToken> tokens_;
  size_t at_ = 0;
};

}  // namespace

std::vector<TemplateNode> parse_chat_template(std::string_view source) { return Parser(source).parse_template(); }

}  // namespace zt
