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

#include <algorithm>

#include "core/error.h"
#include "model/architecture.h"
#include "model/config_reader.h"

namespace zt {

namespace {

using nlohmann::json;

// Keys transformers' PretrainedConfig knows whose non-default values would change the weights
// or the math in a way zerotune does not implement.
void reject_unimplemented_common_keys(const ConfigReader& reader) {
  (void)reader;  // quantization_config: bitsandbytes 4-bit is read below, anything else refused there
}

// transformers' BitsAndBytesConfig as a 4-bit checkpoint's config.json stores it: nf4|fp4
// (transformers' default fp4), double quantization, the compute dtype; bitsandbytes' blocksize 64.
void parse_quantization_config(const ConfigReader& top, ModelConfig& config) {
  if (!top.has("quantization_config")) return;
  if (!top.value("quantization_config").is_object()) top.bad("quantization_config", "expected an object");
  const ConfigReader reader(top.value("quantization_config"), top.where() + ": quantization_config");
  const std::string method = reader.string("quant_method", "bitsandbytes");
  if (method != "bitsandbytes")
    reader.bad("quant_method", "only bitsandbytes' 4-bit checkpoints (QLoRA) are supported, not " + method);
  if (reader.boolean("load_in_8bit", false))
    reader.bad("load_in_8bit", "8-bit (LLM.int8) checkpoints are not supported: zerotune reads bitsandbytes' 4-bit (load_in_4bit)");
  if (!reader.boolean("load_in_4bit", false))
    reader.bad("load_in_4bit", "expected true: zerotune reads bitsandbytes' 4-bit checkpoints (nf4 or fp4)");
  const std::string type = reader.string("bnb_4bit_quant_type", "fp4");
  if (type != "nf4" && type != "fp4") reader.bad("bnb_4bit_quant_type", "expected nf4 or fp4");
  config.quantization.type = parse_quant4_type(type, reader.where());
  config.quantization.double_quant = reader.boolean("bnb_4bit_use_double_quant", false);
  const std::string storage = reader.string("bnb_4bit_quant_storage", "uint8");
  if (storage != "uint8") reader.bad("bnb_4bit_quant_storage", "only uint8 storage (bitsandbytes' default) is supported");
  config.quantization_compute_dtype = reader.string("bnb_4bit_compute_dtype", "float32");
  if (config.quantization_compute_dtype != "float32" && config.quantization_compute_dtype != "bfloat16" &&
      config.quantization_compute_dtype != "float16")
    reader.bad("bnb_4bit_compute_dtype", "expected float32, bfloat16 or float16");
  if (reader.has("llm_int8_skip_modules")) {
    const nlohmann::json& skip = reader.value("llm_int8_skip_modules");
    const bool head_only = skip.is_array() && std::all_of(skip.begin(), skip.end(), [](const nlohmann::json& module) {
      return module.is_string() && module.get<std::string>() == "lm_head";
    });
    if (!head_only) reader.bad("llm_int8_skip_modules", "only the output head (lm_head) may stay unquantized");
  }
}

// DIR/config.json for a directory, else the path itself.
std::string model_config_file(const std::string& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= "config.json";
  return file.string();
}

// Sizes that no run can hold are refused here, naming the key, rather than failing in an
// allocation ("cannot allocate", std::vector's max_size) with no file or key named.
void check_model_size(const ConfigReader& reader, const ModelConfig& config, const std::string& mlp_width_key) {
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
    reader.bad(mlp_width_key,
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
  parse_quantization_config(reader, config);
  row.parse_config(reader, config);
  check_model_size(reader, config, row.naming.mlp_width_key);
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

nlohmann::json quant_config_json(const QuantConfig& quant) {
  return {{"type", quant4_type_name(quant.type)}, {"double_quant", quant.double_quant}, {"blocksize", quant.blocksize}};
}

QuantConfig quant_config_from_json(const nlohmann::json& json, const std::string& where) {
  QuantConfig quant;
  if (json.is_null()) return quant;  // written before 4-bit bases existed: none
  try {
    quant.type = parse_quant4_type(json.at("type").get<std::string>(), where);
    quant.double_quant = json.at("double_quant").get<bool>();
    quant.blocksize = json.at("blocksize").get<int64_t>();
  } catch (const nlohmann::json::exception& error) {
    fail(where, ": 'quantize' is not {type, double_quant, blocksize}: ", error.what());
  }
  return quant;
}

}  // namespace zt
