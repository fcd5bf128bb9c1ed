// Reading a HF config.json into a ModelConfig, the way transformers' config classes read it:
// the keys common to every model type here, then the model type's row of the architecture table
// (architecture.h) reads its own keys with its config class's defaults. Unknown extra keys are
// accepted; a missing or mistyped key or a value zerotune does not implement is an error
// naming the file, the key and the value.
#include "model/config.h"

#include <filesystem>
#include <fstream>
#include <limits>
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

// Sizes that no run can hold are refused here, naming the key, rather than failing in an
// allocation ("cannot allocate", std::vector's max_size) with no file or key named.
void check_model_size(const ConfigReader& reader, const ModelConfig& config) {
  constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();  // token ids are int32 (data, kernels)
  if (config.vocab_size > kMaxTokenId)
    reader.bad("vocab_size", cat("more than ", kMaxTokenId, " tokens (token ids are 32-bit integers in zerotune's data "
                                 "and kernels; a real vocabulary has at most a few hundred thousand)"));
  // The largest tensors' element counts in floating point, so that the check itself cannot overflow.
  const double embedding = static_cast<double>(config.vocab_size) * static_cast<double>(config.embed_dim());
  const double mlp = static_cast<double>(config.hidden_size) * static_cast<double>(config.intermediate_size);
  const double attention = static_cast<double>(config.hidden_size) * static_cast<double>(config.hidden_size);
  constexpr double kMaxElements = 1e12;  // 4 TB in fp32 for one tensor: beyond any model zerotune can train
  if (attention > kMaxElements)
    reader.bad("hidden_size", cat("an attention weight would hold ", attention, " elements: not a real model's size"));
  if (mlp > kMaxElements)
    reader.bad(config.model_type == "opt" ? "ffn_dim" : "intermediate_size",
               cat("an MLP weight would hold ", mlp, " elements: not a real model's size"));
  if (embedding > kMaxElements)
    reader.bad("vocab_size", cat("the embedding would hold vocab_size x hidden size = ", embedding,
                                 " elements (", embedding * 4.0 / 1e12, " TB in fp32): not a real model's size"));
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
  check_model_size(reader, config);
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
