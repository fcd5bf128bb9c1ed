// Operations on chat-template values (data/chat_template_values.h).
#include "data/chat_template_values.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>

#include "core/error.h"

namespace zt {
namespace {

using Json = nlohmann::json;

[[noreturn]] void value_error(const std::string& message) { throw TemplateValueError(message); }

bool is_number(const Json& value) { return value.is_number() || value.is_boolean(); }
bool is_integral(const Json& value) { return value.is_number_integer() || value.is_boolean(); }
int64_t as_integer(const Json& value) { return value.is_boolean() ? (value.get<bool>() ? 1 : 0) : value.get<int64_t>(); }
double as_double(const Json& value) { return value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0) : value.get<double>(); }

// The code point at text[at] and its byte length (malformed bytes: one byte, code 0xFFFD).
std::pair<uint32_t, size_t> decode_utf8(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || at + length > text.size()) return {0xFFFD, 1};
  uint32_t code = length == 1 ? lead : lead & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) code = (code << 6) | (byte(at + i) & 0x3F);
  return {code, length};
}

// Python's str.isspace() for one code point.
bool is_python_space(uint32_t code) {
  return (code >= 0x09 && code <= 0x0D) || (code >= 0x1C && code <= 0x20) || code == 0x85 || code == 0xA0 ||
         code == 0x1680 || (code >= 0x2000 && code <= 0x200A) || code == 0x2028 || code == 0x2029 || code == 0x202F ||
         code == 0x205F || code == 0x3000;
}

std::vector<std::pair<size_t, size_t>> characters(std::string_view text) {  // (start, length) of each character
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t at = 0; at < text.size();) {
    const size_t length = decode_utf8(text, at).second;
    spans.emplace_back(at, length);
    at += length;
  }
  return spans;
}

const std::string& as_string(const Json& value, const char* what) {
  if (!value.is_string()) value_error(cat(what, " needs a string, not ", type_name(value)));
  return value.get_ref<const std::string&>();
}

Json arithmetic(const std::string& op, const Json& left, const Json& right) {
  if (!is_number(left) || !is_number(right))
    value_error(cat("unsupported operand types for ", op, ": '", type_name(left), "' and '", type_name(right), "'"));
  const bool integers = is_integral(left) && is_integral(right);
  if (op == "/") {
    if (as_double(right) == 0.0) value_error("division by zero");
    return as_double(left) / as_double(right);
  }
  if (integers) {
    const int64_t a = as_integer(left), b = as_integer(right);
    if (op == "+") return a + b;
    if (op == "-") return a - b;
    if (op == "*") return a * b;
    if (b == 0) value_error(cat("integer division or modulo by zero (", op, ")"));
    const int64_t quotient = a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);  // Python floors
    return op == "//" ? quotient : a - quotient * b;
  }
  const double a = as_double(left), b = as_double(right);
  if (op == "+") return a + b;
  if (op == "-") return a - b;
  if (op == "*") return a * b;
  if (b == 0.0) value_error(cat("float division or modulo by zero (", op, ")"));
  return op == "//" ? std::floor(a / b) : a - std::floor(a / b) * b;
}

bool less_than(const Json& left, const Json& right, const std::string& op) {
  if (is_number(left) && is_number(right)) return as_double(left) < as_double(right);
  if (left.is_string() && right.is_string()) return left.get_ref<const std::string&>() < right.get_ref<const std::string&>();
  value_error(cat("'", op, "' not supported between '", type_name(left), "' and '", type_name(right), "'"));
}

bool contains(const Json& container, const Json& item) {
  if (is_undefined(container)) return false;
  if (container.is_string())
    return container.get_ref<const std::string&>().find(as_string(item, "'in' on a string")) != std::string::npos;
  if (container.is_array())
    return std::any_of(container.begin(), container.end(), [&](const Json& element) { return values_equal(element, item); });
  if (container.is_object()) return item.is_string() && container.contains(item.get_ref<const std::string&>());
  value_error(cat("argument of type '", type_name(container), "' is not iterable ('in')"));
}

std::string join(const Json& list, const std::string& separator) {
  if (!list.is_array()) value_error(cat("join needs a list, not ", type_name(list)));
  std::string text;
  for (size_t i = 0; i < list.size(); ++i) text += (i == 0 ? "" : separator) + to_text(list[i]);
  return text;
}

std::string ascii_case(const std::string& text, bool upper) {
  std::string out = text;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) >= 0x80) value_error("lower/upper of non-ASCII text is not supported");
    c = upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

void expect_arguments(const std::string& name, const std::vector<Json>& args, size_t low, size_t high) {
  if (args.size() < low || args.size() > high)
    value_error(cat(name, " takes ", low == high ? cat(low) : cat(low, " to ", high), " argument(s), not ", args.size()));
}

Json length_of(const Json& value) {
  if (value.is_string()) return static_cast<int64_t>(characters(value.get_ref<const std::string&>()).size());
  if (value.is_array() || value.is_object()) return static_cast<int64_t>(value.size());
  if (is_undefined(value)) return 0;
  value_error(cat("object of type '", type_name(value), "' has no len()"));
}

}  // namespace

Json undefined_value() { return Json(Json::value_t::discarded); }
bool is_undefined(const Json& value) { return value.is_discarded(); }

bool truthy(const Json& value) {
  if (value.is_discarded() || value.is_null()) return false;
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return as_double(value) != 0.0;
  if (value.is_string()) return !value.get_ref<const std::string&>().empty();
  return !value.empty();
}

std::string to_text(const Json& value) {
  if (value.is_discarded()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "None";
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number()) {  // Python's repr: shortest text that reads back, with a ".0" when integral
    char text[64];
    const double number = value.get<double>();
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(text, sizeof text, "%.*g", precision, number);
      if (std::strtod(text, nullptr) == number) break;
    }
    std::string result = text;
    if (result.find_first_of(".eEn") == std::string::npos) result += ".0";
    return result;
  }
  value_error(cat("printing a ", type_name(value), " is not supported (Python's repr of it)"));
}

bool values_equal(const Json& left, const Json& right) {
  if (is_undefined(left) || is_undefined(right)) return is_undefined(left) && is_undefined(right);
  if (is_number(left) && is_number(right)) return as_double(left) == as_double(right);
  if (left.type() != right.type()) return false;
  if (left.is_array()) {
    if (left.size() != right.size()) return false;
    for (size_t i = 0; i < left.size(); ++i)
      if (!values_equal(left[i], right[i])) return false;
    return true;
  }
  return left == right;
}

std::string type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::discarded: return "undefined";
    case Json::value_t::null: return "NoneType";
    case Json::value_t::boolean: return "bool";
    case Json::value_t::string: return "str";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "dict";
    case Json::value_t::number_float: return "float";
    default: return "int";
  }
}

Json binary_operation(const std::string& op, const Json& left, const Json& right) {
  if (op == "~") return to_text(left) + to_text(right);
  if (op == "in") return contains(right, left);
  if (op == "<") return less_than(left, right, op);
  if (op == ">") return less_than(right, left, op);
  if (op == "<=") return !less_than(right, left, op);
  if (op == ">=") return !less_than(left, right, op);
  if (op == "+" && left.is_string() && right.is_string())
    return left.get_ref<const std::string&>() + right.get_ref<const std::string&>();
  if (op == "+" && left.is_array() && right.is_array()) {
    Json joined = left;
    for (const Json& item : right) joined.push_back(item);
    return joined;
  }
  if (op == "*" && (left.is_string() || right.is_string()) && (is_integral(left) || is_integral(right))) {
    const Json& text = left.is_string() ? left : right;
    std::string repeated;
    for (int64_t i = 0; i < as_integer(left.is_string() ? right : left); ++i) repeated += text.get_ref<const std::string&>();
    return repeated;
  }
  if (op == "%" && left.is_string()) value_error("string formatting with % is not supported");
  return arithmetic(op, left, right);
}

Json subscript(const Json& object, const Json& key) {
  if (is_undefined(object)) value_error("indexing an undefined value");
  if (object.is_object()) {
    if (!key.is_string()) return undefined_value();
    const auto found = object.find(key.get_ref<const std::string&>());
    return found == object.end() ? undefined_value() : *found;
  }
  if (object.is_array()) {
    if (!is_integral(key)) value_error(cat("list indices must be integers, not ", type_name(key)));
    int64_t index = as_integer(key);
    if (index < 0) index += static_cast<int64_t>(object.size());
    return index >= 0 && index < static_cast<int64_t>(object.size()) ? object[static_cast<size_t>(index)] : undefined_value();
  }
  if (object.is_string() && is_integral(key)) {  // one character (code point), as Python indexes a str
    const std::string& text = object.get_ref<const std::string&>();
    const std::vector<std::pair<size_t, size_t>> spans = characters(text);
    int64_t index = as_integer(key);
    if (index < 0) index += static_cast<int64_t>(spans.size());
    if (index < 0 || index >= static_cast<int64_t>(spans.size())) return undefined_value();
    const auto [start, length] = spans[static_cast<size_t>(index)];
    return text.substr(start, length);
  }
  value_error(cat("indexing a ", type_name(object), " by a ", type_name(key), " is not supported"));
}

Json slice(const Json& object, const Json& start, const Json& stop, const Json& step) {
  if (!object.is_array()) value_error(cat("slicing a ", type_name(object), " is not supported (lists only)"));
  const auto bound = [](const Json& value, const char* what) -> std::optional<int64_t> {
    if (is_undefined(value) || value.is_null()) return std::nullopt;
    if (!is_integral(value)) value_error(cat("slice ", what, " must be an integer, not ", type_name(value)));
    return as_integer(value);
  };
  const int64_t n = static_cast<int64_t>(object.size());
  const int64_t stride = bound(step, "step").value_or(1);
  if (stride == 0) value_error("slice step cannot be zero");
  // Python's slice.indices(n).
  const auto clamp = [&](std::optional<int64_t> index, int64_t when_absent) {
    if (!index) return when_absent;
    int64_t i = *index < 0 ? *index + n : *index;
    return stride > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t first = clamp(bound(start, "start"), stride > 0 ? 0 : n - 1);
  const int64_t last = clamp(bound(stop, "stop"), stride > 0 ? n : -1);
  Json result = Json::array();
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) result.push_back(object[static_cast<size_t>(i)]);
  return result;
}

Json apply_filter(const std::string& name, const Json& value, const std::vector<Json>& args) {
  if (name == "default" || name == "d") {
    expect_arguments(name, args, 0, 2);
    const bool boolean = args.size() > 1 && truthy(args[1]);
    const bool use_default = boolean ? !truthy(value) : is_undefined(value);
    return use_default ? (args.empty() ? Json("") : args[0]) : value;
  }
  if (name == "join") {
    expect_arguments(name, args, 0, 1);
    return join(value, args.empty() ? "" : as_string(args[0], "join's separator"));
  }
  if (name == "trim") {
    expect_arguments(name, args, 0, 1);
    return python_strip(to_text(value), true, true, args.empty() || args[0].is_null() ? nullptr : &args[0]);
  }
  expect_arguments(name, args, 0, 0);
  if (name == "length" || name == "count") return length_of(value);
  if (name == "lower" || name == "upper") return ascii_case(to_text(value), name == "upper");
  if (name == "string") return to_text(value);
  if (name == "first" || name == "last") {
    if (!value.is_array()) value_error(cat(name, " needs a list, not ", type_name(value)));
    return value.empty() ? undefined_value() : (name == "first" ? value.front() : value.back());
  }
  value_error(cat("the filter '", name, "' is not supported (zerotune knows trim, length, count, lower, upper, default, d, "
                  "string, first, last, join)"));
}

bool apply_test(const std::string& name, const Json& value, const std::vector<Json>& args) {
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    expect_arguments(name, args, 1, 1);
    return values_equal(value, args[0]) == (name[0] == 'e' || name[0] == '=');
  }
  if (name == "in") {
    expect_arguments(name, args, 1, 1);
    return contains(args[0], value);
  }
  static const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
                                       "true", "false", "mapping", "sequence", "iterable", "even", "odd"};
  if (std::find(std::begin(kTests), std::end(kTests), name) == std::end(kTests))
    value_error(cat("the test 'is ", name, "' is not supported (zerotune knows defined, undefined, none, string, number, "
                    "integer, float, boolean, mapping, sequence, iterable, true, false, even, odd, eq/equalto, ne, in)"));
  expect_arguments(name, args, 0, 0);
  if (name == "defined") return !is_undefined(value);
  if (name == "undefined") return is_undefined(value);
  if (name == "none") return value.is_null();
  if (name == "string") return value.is_string();
  if (name == "number") return value.is_number() || value.is_boolean();
  if (name == "integer") return value.is_number_integer();
  if (name == "float") return value.is_number_float();
  if (name == "boolean") return value.is_boolean();
  if (name == "true") return value.is_boolean() && value.get<bool>();
  if (name == "mapping") return value.is_object();
  if (name == "sequence") return value.is_array() || value.is_string() || value.is_object();
  if (name == "iterable") return value.is_array() || value.is_string() || value.is_object() || is_undefined(value);
  if (name == "even" || name == "odd") {
    if (!is_integral(value)) value_error(cat("'is ", name, "' needs an integer, not ", type_name(value)));
    return (as_integer(value) % 2 == 0) == (name == "even");
  }
  return value.is_boolean() && !value.get<bool>();  // "false"
}

Json call_method(const std::string& name, const Json& object, const std::vector<Json>& args) {
  static const char* const kMethods[] = {"strip", "lstrip", "rstrip", "lower", "upper", "startswith", "endswith", "replace", "get"};
  if (std::find(std::begin(kMethods), std::end(kMethods), name) == std::end(kMethods) || (name == "get") != object.is_object())
    value_error(cat("the method ", name, "() of a ", type_name(object), " is not supported (zerotune knows the string methods "
                    "strip, lstrip, rstrip, lower, upper, startswith, endswith, replace, and dict.get)"));
  if (object.is_object() && name == "get") {
    expect_arguments(name, args, 1, 2);
    const Json found = subscript(object, args[0]);
    return is_undefined(found) ? (args.size() > 1 ? args[1] : Json(nullptr)) : found;
  }
  const std::string& text = as_string(object, cat("the method ", name, "()").c_str());
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    expect_arguments(name, args, 0, 1);
    const Json* chars = args.empty() || args[0].is_null() ? nullptr : &args[0];
    return python_strip(text, name != "rstrip", name != "lstrip", chars);
  }
  if (name == "lower" || name == "upper") {
    expect_arguments(name, args, 0, 0);
    return ascii_case(text, name == "upper");
  }
  if (name == "startswith" || name == "endswith") {
    expect_arguments(name, args, 1, 1);
    const std::string& affix = as_string(args[0], name.c_str());
    if (affix.size() > text.size()) return false;
    return text.compare(name == "startswith" ? 0 : text.size() - affix.size(), affix.size(), affix) == 0;
  }
  if (name == "replace") {
    expect_arguments(name, args, 2, 2);
    const std::string& from = as_string(args[0], "replace");
    const std::string& to = as_string(args[1], "replace");
    if (from.empty()) value_error("replace of an empty string is not supported");
    std::string result;
    size_t at = 0;
    for (size_t found = text.find(from); found != std::string::npos; found = text.find(from, at)) {
      result += text.substr(at, found - at) + to;
      at = found + from.size();
    }
    return result + text.substr(at);
  }
  value_error(cat("the method ", name, "() is not supported"));
}

std::string python_strip(std::string_view text, bool left, bool right, const Json* chars) {
  std::vector<uint32_t> strip_set;
  if (chars != nullptr)
    for (const auto& [at, length] : characters(as_string(*chars, "strip's argument"))) strip_set.push_back(decode_utf8(as_string(*chars, ""), at).first);
  const auto strips = [&](uint32_t code) {
    return chars == nullptr ? is_python_space(code) : std::find(strip_set.begin(), strip_set.end(), code) != strip_set.end();
  };
  const std::vector<std::pair<size_t, size_t>> spans = characters(text);
  size_t first = 0, last = spans.size();
  while (left && first < last && strips(decode_utf8(text, spans[first].first).first)) ++first;
  while (right && last > first && strips(decode_utf8(text, spans[last - 1].first).first)) --last;
  if (first == last) return "";
  const size_t begin = spans[first].first, end = spans[last - 1].first + spans[last - 1].second;
  return std::string(text.substr(begin, end - begin));
}

}  // namespace zt
