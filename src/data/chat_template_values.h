// The values of zerotune's chat-template interpreter (data/chat_template.h) and what can be done
// with them. A value is a nlohmann::json (the messages arrive as JSON anyway): null is Jinja's
// none, and the "discarded" JSON value stands for Jinja's Undefined (a missing variable, key or
// index). The rules are Python's and Jinja's, as far as chat templates rely on them.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

// A runtime error of an operation on values; the interpreter adds the template position.
struct TemplateValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json undefined_value();
bool is_undefined(const nlohmann::json& value);

// Python's truth value (undefined: false).
bool truthy(const nlohmann::json& value);
// Python's str() of a value, as {{ value }} prints it (undefined: ""; True, None, 3, 1.5).
std::string to_text(const nlohmann::json& value);
// Python's == (True == 1; undefined equals only undefined).
bool values_equal(const nlohmann::json& left, const nlohmann::json& right);
// A Python type name for messages ("str", "int", "list", "dict", "undefined", ...).
std::string type_name(const nlohmann::json& value);

// + - * / // % ~ < > <= >= in ("==", "!=", "and", "or", "not in" are the interpreter's).
nlohmann::json binary_operation(const std::string& op, const nlohmann::json& left, const nlohmann::json& right);

// value[key]: dicts by string, lists by integer (negative from the end); undefined when absent.
nlohmann::json subscript(const nlohmann::json& object, const nlohmann::json& key);
// list[start:stop:step] with Python's rules (absent parts: undefined values).
nlohmann::json slice(const nlohmann::json& object, const nlohmann::json& start, const nlohmann::json& stop,
                     const nlohmann::json& step);

// The filters, tests and methods of data/chat_template.h; any other name is a TemplateValueError
// naming it and listing the ones there are.
nlohmann::json apply_filter(const std::string& name, const nlohmann::json& value, const std::vector<nlohmann::json>& args);
bool apply_test(const std::string& name, const nlohmann::json& value, const std::vector<nlohmann::json>& args);
nlohmann::json call_method(const std::string& name, const nlohmann::json& object, const std::vector<nlohmann::json>& args);

// Python's str.strip/lstrip/rstrip: without `chars`, Unicode whitespace (str.isspace).
std::string python_strip(std::string_view text, bool left, bool right, const nlohmann::json* chars = nullptr);

}  // namespace zt
