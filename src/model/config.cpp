// Reading a HF config.json into a ModelConfig, the way transformers' config classes read it:
// defaults from the class (LlamaConfig of transformers 4.40, plus the newer head_dim/mlp_bias
// keys), unknown extra keys accepted, and an error naming the file, the key and the value for
// a missing or mistyped key or for a value zerotune does not implement.
// Adding an architecture is adding one parse_<type> function and one row of architectures().
#include "model/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"

namespace zt {

namespace {

using nlohmann::json;

// Typed access to the keys of one config.json object. Missing keys and JSON nulls take the
// config class's default (as Python's keyword defaults do); anything else must have the right
// JSON type or the error names the file, the key and the value.
class ConfigReader {
 public:
  ConfigReader(const json& object, const std::string& where) : object_(object), where_(where) {}

  const std::string& where() const { return where_; }

  // True when the key is present with a non-null value.
  bool has(const std::string& key) const {
    auto found = object_.find(key);
    return found != object_.end() && !found->is_null();
  }

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

std::optional<int64_t> first_id(const std::vector<int64_t>& ids) {
  if (ids.empty()) return std::nullopt;
  return ids.front();
}

// Attention geometry shared by all architectures: head_dim from the key when given (newer
// transformers), else hidden_size / heads, which must then divide; heads must be a multiple of
// the key/value heads (GQA).
void resolve_attention_shape(const ConfigReader& reader, ModelConfig& config) {
  if (config.num_key_value_heads <= 0) reader.bad("num_key_value_heads", "expected a positive integer");
  if (config.num_attention_heads % config.num_key_value_heads != 0)
    reader.bad("num_key_value_heads", cat("num_attention_heads = ", config.num_attention_heads,
                                          " is not a multiple of it (grouped-query attention needs one)"));
  if (std::optional<int64_t> head_dim = reader.optional_positive_integer("head_dim")) {
    config.head_dim = *head_dim;
  } else {
    if (config.hidden_size % config.num_attention_heads != 0)
      reader.bad("num_attention_heads", cat("hidden_size = ", config.hidden_size,
                                            " is not divisible by it (and no head_dim is given)"));
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
}

// rope_scaling: null, {"type"|"rope_type": "linear", "factor": f > 0} (positions divided by f)
// or {"rope_type": "default"} (plain RoPE, newer transformers). dynamic, yarn, llama3, longrope
// change the frequencies in ways zerotune does not implement.
double parse_rope_linear_factor(const ConfigReader& reader) {
  const std::string key = "rope_scaling";
  if (!reader.has(key)) return 1.0;
  const json& scaling = reader.value(key);
  if (!scaling.is_object()) reader.bad(key, "expected null or an object like {\"type\": \"linear\", \"factor\": 2.0}");
  const char* type_key = scaling.contains("rope_type") ? "rope_type" : "type";
  if (!scaling.contains(type_key) || !scaling.at(type_key).is_string())
    reader.bad(key, "expected a string field \"type\" (or \"rope_type\")");
  const std::string type = scaling.at(type_key).get<std::string>();
  if (type == "default") return 1.0;
  if (type != "linear")
    reader.bad(key, cat("rope scaling type '", type,
                        "' is not implemented (zerotune implements null and {\"type\": \"linear\", \"factor\": f})"));
  if (!scaling.contains("factor") || !scaling.at("factor").is_number() || !(scaling.at("factor").get<double>() > 0.0))
    reader.bad(key, "linear rope scaling needs a numeric \"factor\" > 0");
  return scaling.at("factor").get<double>();
}

// Keys transformers' PretrainedConfig knows whose non-default values would change the weights
// or the math in a way zerotune does not implement.
void reject_unimplemented_common_keys(const ConfigReader& reader) {
  if (reader.has("quantization_config"))
    reader.bad("quantization_config", "quantized checkpoints are not supported (zerotune needs fp32/bf16/fp16 weights)");
}

// transformers.LlamaConfig (4.40 defaults; head_dim and mlp_bias as newer versions add them).
void parse_llama(const ConfigReader& reader, ModelConfig& config) {
  config.vocab_size = reader.positive_integer("vocab_size", 32000);
  config.hidden_size = reader.positive_integer("hidden_size", 4096);
  config.intermediate_size = reader.positive_integer("intermediate_size", 11008);
  config.num_hidden_layers = reader.positive_integer("num_hidden_layers", 32);
  config.num_attention_heads = reader.positive_integer("num_attention_heads", 32);
  config.num_key_value_heads = reader.positive_integer("num_key_value_heads", config.num_attention_heads);
  resolve_attention_shape(reader, config);
  config.max_position_embeddings = reader.positive_integer("max_position_embeddings", 2048);
  config.norm_eps = reader.positive_number("rms_norm_eps", 1e-6);
  config.rope_theta = reader.positive_number("rope_theta", 10000.0);
  config.rope_linear_factor = parse_rope_linear_factor(reader);

  // transformers maps both names to SiLU (ACT2FN); the LLaMA MLP is SwiGLU with it.
  std::string act = reader.string("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    reader.bad("hidden_act", "LLaMA models in zerotune use SwiGLU with 'silu'; this activation is not implemented");
  config.hidden_act = "silu";

  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", false);
  config.attention_bias = reader.boolean("attention_bias", false);
  config.mlp_bias = reader.boolean("mlp_bias", false);
  config.initializer_range = reader.number("initializer_range", 0.02);
  if (config.initializer_range < 0.0) reader.bad("initializer_range", "expected a number >= 0");

  // Attention dropout would add randomness to the forward pass that zerotune does not draw.
  if (reader.number("attention_dropout", 0.0) != 0.0)
    reader.bad("attention_dropout", "attention dropout is not implemented (use 0.0)");
  // pretraining_tp > 1 only splits the projections into slices whose results are summed: the
  // same math up to float reassociation, so it is accepted (and must be a positive integer).
  reader.positive_integer("pretraining_tp", 1);

  config.bos_token_id = first_id(reader.token_ids("bos_token_id", 1));
  config.eos_token_ids = reader.token_ids("eos_token_id", 2);
  config.eos_token_id = first_id(config.eos_token_ids);
  config.pad_token_id = first_id(reader.token_ids("pad_token_id", std::nullopt));
}

using ArchitectureParser = void (*)(const ConfigReader&, ModelConfig&);

// The model types zerotune implements, in the order the error message lists them.
const std::vector<std::pair<std::string, ArchitectureParser>>& architectures() {
  static const std::vector<std::pair<std::string, ArchitectureParser>> table = {
      {"llama", parse_llama},
  };
  return table;
}

std::string supported_model_types() {
  std::string names;
  for (const auto& [name, parser] : architectures()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

// DIR/config.json for a directory, else the path itself.
std::string model_config_file(const std::string& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= "config.json";
  return file.string();
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) fail(where, ": expected a JSON object at the top level, got ", json.type_name());
  ConfigReader reader(json, where);
  if (!reader.has("model_type"))
    reader.bad("model_type", cat("it names the architecture; supported: ", supported_model_types()));
  const std::string model_type = reader.string("model_type", "");
  ArchitectureParser parser = nullptr;
  for (const auto& [name, candidate] : architectures())
    if (name == model_type) parser = candidate;
  if (parser == nullptr) reader.bad("model_type", cat("not supported (supported: ", supported_model_types(), ")"));

  ModelConfig config;
  config.path = where;
  config.model_type = model_type;
  config.raw = json;
  reject_unimplemented_common_keys(reader);
  parser(reader, config);
  return config;
}

ModelConfig load_model_config(const std::string& path) {
  const std::string file = model_config_file(path);
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (std::filesystem::is_directory(path)) fail(path, ": the model directory has no config.json (", file, ")");
    fail(file, ": cannot open the model config (", std::filesystem::exists(file) ? "not readable" : "no such file", ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  ZT_CHECK(!in.bad(), file, ": read error");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    fail(file, ": invalid JSON: ", error.what());
  }
  return parse_model_config(json, file);
}

}  // namespace zt
