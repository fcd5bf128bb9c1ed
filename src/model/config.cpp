// Reading a HF config.json into a ModelConfig, the way transformers' config classes read it:
// the keys common to every model type here, then the model type's row of the architecture table
// (architecture.h) reads its own keys with its config class's defaults. Unknown extra keys are
// accepted; a missing or mistyped key or a value zerotune does not implement is an error
// naming the file, the key and the value.
#include "model/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/architecture.h"
#include "model/config_reader.h"

namespace zt {

namespace {

using nlohmann::json;

// Keys transformers' PretrainedConfig knows whose non-default values would change the weights
// or the math in a way zerotune does not implement.
void reject_unimplemented_common_keys(const ConfigReader& reader) {
  if (reader.has("quantization_config"))
    reader.bad("quantization_config", "quantized checkpoints are not supported (zerotune needs fp32/bf16/fp16 weights)");
}

// DIR/config.json for a directory, else the path itself.
std::string model_config_file(const std::string& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= "config.json";
  return file.string();
}

}  // namespace

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

void check_sequence_length(const ModelConfig& config, int64_t seq_len, const std::string& what) {
  if (config.positions == PositionKind::Learned)
    ZT_CHECK(seq_len <= config.max_position_embeddings, what, ": sequences of up to ", seq_len, " tokens, but ",
             config.path, " has max_position_embeddings = ", config.max_position_embeddings,
             " (a learned position table has no row beyond it): prepare the data with a smaller --max-seq-len");
  if (config.sliding_window > 0)
    ZT_CHECK(seq_len <= config.sliding_window, what, ": sequences of up to ", seq_len, " tokens, but ", config.path,
             " has sliding_window = ", config.sliding_window,
             " and zerotune's attention has no sliding window (up to the window both are the same): prepare the data "
             "with --max-seq-len ", config.sliding_window, " or less");
}

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object()) fail(where, ": expected a JSON object at the top level, got ", json.type_name());
  ConfigReader reader(json, where);
  if (!reader.has("model_type"))
    reader.bad("model_type", cat("it names the architecture; supported: ", supported_model_types()));
  const std::string model_type = reader.string("model_type", "");
  const Architecture& row = architecture(model_type, where);

  ModelConfig config;
  config.path = where;
  config.model_type = model_type;
  config.raw = json;
  reject_unimplemented_common_keys(reader);
  row.parse_config(reader, config);
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
