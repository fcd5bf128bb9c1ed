// ModelConfig: the part of a HF config.json that determines the math, read the way
// transformers reads it (defaults from the model's PretrainedConfig class; keys that do not
// change the math are accepted; a missing required key or an unimplemented value is an error
// naming the file, the key and the value).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

struct ModelConfig {
  std::string path;        // the config.json it came from (for messages)
  std::string model_type;  // "llama" (OPT comes next)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;   // MLP width (OPT: ffn_dim)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0; // defaults to num_attention_heads
  int64_t head_dim = 0;            // hidden_size / num_attention_heads unless given
  int64_t max_position_embeddings = 0;
  double norm_eps = 1e-6;          // llama: rms_norm_eps
  double rope_theta = 10000.0;
  double rope_linear_factor = 1.0; // rope_scaling {"type": "linear", "factor": f}; else 1
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;  // all of them when eos_token_id is a list (eos_token_id: the first)
  double initializer_range = 0.02;
  nlohmann::json raw;              // the whole file, written back unchanged by init/export
};

// Reads and validates DIR/config.json or a path to a config.json file.
ModelConfig load_model_config(const std::string& path);
// Validates an already parsed json (`where` names its origin in messages).
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& where);

}  // namespace zt
