// Rendering a parsed chat template (data/chat_template.h): a walk over the nodes with a stack of
// variable scopes (the render's variables at the bottom, one scope per loop iteration above).
#include "data/chat_template.h"

#include "core/error.h"
#include "data/chat_template_lexer.h"
#include "data/chat_template_values.h"

namespace zt {
namespace {

using Json = nlohmann::json;
using ExprKind = TemplateExpr::Kind;
using NodeKind = TemplateNode::Kind;

// The key that makes an object a namespace() (no template can name it: it is no identifier).
constexpr const char* kNamespaceMarker = " namespace";

class Renderer {
 public:
  Renderer(std::string_view source, const Json& variables) : source_(source) { scopes_.push_back(variables); }

  void render(const std::vector<TemplateNode>& nodes, std::string& out) {
    for (const TemplateNode& node : nodes) render_node(node, out);
  }

 private:
  void render_node(const TemplateNode& node, std::string& out) {
    switch (node.kind) {
      case NodeKind::kText: out += node.text; return;
      case NodeKind::kOutput: {
        const Json value = evaluate(*node.expr);
        try {
          out += to_text(value);
        } catch (const TemplateValueError& error) {
          template_error(source_, node.offset, error.what());
        }
        return;
      }
      case NodeKind::kSet:
        if (node.names.size() > 1) set_namespace_attribute(node);
        else scopes_.back()[node.names[0]] = evaluate(*node.expr);
        return;
      case NodeKind::kIf:
        for (const TemplateNode::Branch& branch : node.branches)
          if (!branch.condition || truthy(evaluate(*branch.condition))) {
            render(branch.body, out);
            return;
          }
        return;
      case NodeKind::kFor: render_loop(node, out); return;
    }
  }

  void render_loop(const TemplateNode& node, std::string& out) {
    const Json items = loop_items(node);  // [length]
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t index = 0; index < length; ++index) {
      Json scope = bind_loop_variables(node, items[static_cast<size_t>(index)]);
      scope["loop"] = {{"index0", index},          {"index", index + 1},
                       {"first", index == 0},      {"last", index + 1 == length},
                       {"length", length},         {"revindex", length - index},
                       {"revindex0", length - index - 1}};
      scopes_.push_back(std::move(scope));
      render(node.body, out);
      scopes_.pop_back();
    }
  }

  // What the loop iterates: the list, less the items its "if" filter drops.
  Json loop_items(const TemplateNode& node) {
    const Json items = evaluate(*node.expr);
    if (is_undefined(items)) return Json::array();  // Jinja iterates an undefined value as an empty one
    if (!items.is_array())
      template_error(source_, node.expr->offset, "a for loop over a ", type_name(items), " is not supported (lists only)");
    if (!node.condition) return items;
    Json kept = Json::array();
    for (const Json& item : items) {
      scopes_.push_back(bind_loop_variables(node, item));
      const bool keep = truthy(evaluate(*node.condition));
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    return kept;
  }

  // A scope with the loop variable(s) bound to `item` ("for a, b in pairs" unpacks a list item).
  Json bind_loop_variables(const TemplateNode& node, const Json& item) const {
    Json scope = Json::object();
    if (node.names.size() == 1) {
      scope[node.names[0]] = item;
      return scope;
    }
    if (!item.is_array() || item.size() != node.names.size())
      template_error(source_, node.offset, "cannot unpack a ", type_name(item), " into the ", node.names.size(),
                     " loop variables");
    for (size_t i = 0; i < node.names.size(); ++i) scope[node.names[i]] = item[i];
    return scope;
  }

  // {% set ns.attr = value %}: a namespace() object is one object wherever it is read, so the
  // attribute is set in the scope that holds it (a set inside a loop reaches out of it).
  void set_namespace_attribute(const TemplateNode& node) {
    Json value = evaluate(*node.expr);
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      const auto found = scope->find(node.names[0]);
      if (found == scope->end()) continue;
      if (!found->is_object() || !found->contains(kNamespaceMarker)) break;
      (*found)[node.names[1]] = std::move(value);
      return;
    }
    template_error(source_, node.offset, "cannot set ", node.names[0], ".", node.names[1], ": ", node.names[0],
                   " is no namespace() object");
  }

  Json lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      const auto found = scope->find(name);
      if (found != scope->end()) return *found;
    }
    return undefined_value();
  }

  // An expression's value; an operation's TemplateValueError becomes a zt::Error at its position.
  Json evaluate(const TemplateExpr& expr) {
    try {
      return evaluate_unchecked(expr);
    } catch (const TemplateValueError& error) {
      template_error(source_, expr.offset, error.what());
    }
  }

  std::vector<Json> evaluate_children(const TemplateExpr& expr, size_t first) {
    std::vector<Json> values;
    for (size_t i = first; i < expr.children.size(); ++i) values.push_back(evaluate(*expr.children[i]));
    return values;
  }

  Json evaluate_optional(const std::unique_ptr<TemplateExpr>& expr) { return expr ? evaluate(*expr) : undefined_value(); }

  Json evaluate_unchecked(const TemplateExpr& expr) {
    switch (expr.kind) {
      case ExprKind::kLiteral: return expr.literal;
      case ExprKind::kList: return Json(evaluate_children(expr, 0));
      case ExprKind::kDict: return evaluate_dict(expr);
      case ExprKind::kName: return lookup(expr.name);
      case ExprKind::kAttribute: return attribute(evaluate(*expr.children[0]), expr.name);
      case ExprKind::kSubscript: return subscript(evaluate(*expr.children[0]), evaluate(*expr.children[1]));
      case ExprKind::kSlice:
        return slice(evaluate(*expr.children[0]), evaluate_optional(expr.children[1]), evaluate_optional(expr.children[2]),
                     evaluate_optional(expr.children[3]));
      case ExprKind::kCall: return call_function(expr);
      case ExprKind::kMethodCall:
        refuse_keywords(expr);
        return call_method(expr.name, evaluate(*expr.children[0]), evaluate_children(expr, 1));
      case ExprKind::kFilter:
        refuse_keywords(expr);
        return apply_filter(expr.name, evaluate(*expr.children[0]), evaluate_children(expr, 1));
      case ExprKind::kTest:
        refuse_keywords(expr);
        return apply_test(expr.name, evaluate(*expr.children[0]), evaluate_children(expr, 1)) != expr.negated;
      case ExprKind::kNot: return !truthy(evaluate(*expr.children[0]));
      case ExprKind::kNegate: return binary_operation("-", Json(0), evaluate(*expr.children[0]));
      case ExprKind::kBinary: return evaluate_binary(expr);
      case ExprKind::kConditional:
        return truthy(evaluate(*expr.children[1])) ? evaluate(*expr.children[0]) : evaluate_optional(expr.children[2]);
    }
    throw TemplateValueError("unknown expression");
  }

  // x.name: a key of a dict (undefined when absent); of undefined an error, as in Jinja.
  static Json attribute(const Json& object, const std::string& name) {
    if (is_undefined(object)) throw TemplateValueError(cat("'", name, "' of an undefined value"));
    if (!object.is_object()) return undefined_value();
    const auto found = object.find(name);
    return found == object.end() ? undefined_value() : *found;
  }

  static void refuse_keywords(const TemplateExpr& expr) {
    if (!expr.keywords.empty())
      throw TemplateValueError(cat("keyword arguments (", expr.name, "(", expr.keywords[0], "=...)) are not supported"));
  }

  // raise_exception(message): the template refuses the conversation. No other function exists here.
  Json call_function(const TemplateExpr& expr) {
    if (expr.name == "namespace") return make_namespace(expr);
    if (expr.name != "raise_exception")
      throw TemplateValueError(cat("the function ", expr.name, "() is not supported (zerotune's chat templates can call "
                                   "raise_exception and namespace only)"));
    refuse_keywords(expr);
    const std::vector<Json> args = evaluate_children(expr, 0);
    fail("the chat template refused the conversation: ", args.empty() ? std::string() : to_text(args[0]));
  }

  // namespace(name=value, ...): an object whose attributes {% set ns.name = ... %} can change.
  Json make_namespace(const TemplateExpr& expr) {
    if (expr.children.size() != expr.keywords.size())
      throw TemplateValueError("namespace() takes keyword arguments only here (namespace(name=value, ...))");
    Json object = {{kNamespaceMarker, true}};
    for (size_t i = 0; i < expr.keywords.size(); ++i) object[expr.keywords[i]] = evaluate(*expr.children[i]);
    return object;
  }

  Json evaluate_dict(const TemplateExpr& expr) {
    Json dict = Json::object();
    for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
      const Json key = evaluate(*expr.children[i]);
      if (!key.is_string()) throw TemplateValueError(cat("dict keys must be strings here, not ", type_name(key)));
      dict[key.get<std::string>()] = evaluate(*expr.children[i + 1]);
    }
    return dict;
  }

  Json evaluate_binary(const TemplateExpr& expr) {
    const Json left = evaluate(*expr.children[0]);
    if (expr.name == "and") return truthy(left) ? evaluate(*expr.children[1]) : left;  // Python returns an operand
    if (expr.name == "or") return truthy(left) ? left : evaluate(*expr.children[1]);
    const Json right = evaluate(*expr.children[1]);
    if (expr.name == "==") return values_equal(left, right);
    if (expr.name == "!=") return !values_equal(left, right);
    if (expr.name == "in") return binary_operation("in", left, right);
    if (expr.name == "not in") return !binary_operation("in", left, right).get<bool>();
    if (expr.name != "~" && (is_undefined(left) || is_undefined(right)))
      throw TemplateValueError(cat("an undefined value in '", expr.name, "'"));
    return binary_operation(expr.name, left, right);
  }

  std::string_view source_;
  std::vector<Json> scopes_;  // [0]: the render's variables; then one per loop iteration
};

}  // namespace

ChatTemplate::ChatTemplate(std::string source, const std::string& origin) : source_(normalize_template_newlines(source)) {
  try {
    nodes_ = parse_chat_template(source_);
  } catch (const Error& error) {
    fail(origin, ": ", error.what());
  }
}

std::string ChatTemplate::render(const nlohmann::json& variables) const {
  ZT_CHECK(variables.is_object(), "chat template variables must be a JSON object");
  std::string out;
  Renderer(source_, variables).render(nodes_, out);
  return out;
}

}  // namespace zt
