// ConfigReader: typed access to the keys of one HF config.json object, the way transformers'
// config classes read them. Missing keys and JSON nulls take the config class's default (as
// Python's keyword defaults do); anything else must have the right JSON type or the error names
// the file, the key and the value. Each architecture's parse function (architecture.h) reads its
// keys through it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace zt {

// Typed access to the keys of one config.json object. Missing keys and JSON nulls take the
// config class's default (as Python's keyword defaults do); anything else must have the right
// JSON type or the error names the file, the key and the value.
class ConfigReader {
 public:
  using json = nlohmann::json;
  ConfigReader(const json& object, const std::string& where) : object_(object), where_(where) {}

  const std::string& where() const { return where_; }

  // True when the key is present with a non-null value.
  bool has(const std::string& key) const {
    auto found = object_.find(key);
    return found != object_.end() && !found->is_null();
  }

  // True when the key is there at all, null included (a null may differ from the class default).
  bool present(const std::string& key) const { return object_.contains(key); }

  const json& value(const std::string& key) const { return object_.at(key); }

  [[noreturn]] void bad(const std::string& key, const std::string& problem) const {
    if (object_.contains(key)) fail(where_, ": key '", key, "' = ", object_.at(key).dump(), ": ", problem);
    fail(where_, ": key '", key, "' is missing: ", problem);
  }

  std::optional<int64_t> optional_integer(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = value(key);
    // Booleans are not numbers in nlohmann::json; 4096.0 is a float and would break nn.Linear.
    if (!v.is_number_integer()) bad(key, "expected an integer");
    return v.get<int64_t>();
  }

  int64_t positive_integer(const std::string& key, int64_t default_value) const {
    int64_t result = optional_integer(key).value_or(default_value);
    if (result <= 0) bad(key, "expected a positive integer");
    return result;
  }

  std::optional<int64_t> optional_positive_integer(const std::string& key) const {
    std::optional<int64_t> result = optional_integer(key);
    if (result && *result <= 0) bad(key, "expected a positive integer");
    return result;
  }

  double number(const std::string& key, double default_value) const {
    if (!has(key)) return default_value;
    if (!value(key).is_number()) bad(key, "expected a number");
    return value(key).get<double>();
  }

  double positive_number(const std::string& key, double default_value) const {
    double result = number(key, default_value);
    if (!(result > 0.0)) bad(key, "expected a positive number");
    return result;
  }

  bool boolean(const std::string& key, bool default_value) const {
    if (!has(key)) return default_value;
    if (!value(key).is_boolean()) bad(key, "expected true or false");
    return value(key).get<bool>();
  }

  std::string string(const std::string& key, const std::string& default_value) const {
    if (!has(key)) return default_value;
    if (!value(key).is_string()) bad(key, "expected a string");
    return value(key).get<std::string>();
  }

  // A token id: an integer, or (eos_token_id of newer models) a list of integers.
  std::vector<int64_t> token_ids(const std::string& key, std::optional<int64_t> default_value) const {
    if (!has(key)) return default_value ? std::vector<int64_t>{*default_value} : std::vector<int64_t>{};
    const json& v = value(key);
    if (v.is_number_integer()) return {v.get<int64_t>()};
    std::vector<int64_t> ids;
    if (v.is_array() && !v.empty()) {
      for (const json& id : v) {
        if (!id.is_number_integer()) bad(key, "expected an integer or a list of integers");
        ids.push_back(id.get<int64_t>());
      }
      return ids;
    }
    bad(key, "expected an integer or a non-empty list of integers");
  }

 private:
  const json& object_;
  std::string where_;
};


// The first of a list of token ids (eos_token_id may be a list), or none.
inline std::optional<int64_t> first_id(const std::vector<int64_t>& ids) {
  if (ids.empty()) return std::nullopt;
  return ids.front();
}

// Attention geometry shared by all architectures: head_dim from the key when given (newer
// transformers), else hidden_size / heads, which must then divide; heads must be a multiple of
// the key/value heads (GQA). Needs hidden_size and both head counts set.
void resolve_attention_shape(const ConfigReader& reader, ModelConfig& config);

}  // namespace zt
