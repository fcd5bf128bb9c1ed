// ModelConfig: the part of a HF config.json that determines the math, read the way
// transformers reads it (defaults from the model's PretrainedConfig class; keys that do not
// change the math are accepted; a missing required key or an unimplemented value is an error
// naming the file, the key and the value). Which keys a model_type has and what they mean is
// its architecture's parse function (architecture.h: one row per model_type).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/quant4bit.h"

namespace zt {

enum class NormKind { RMSNorm, LayerNorm };
enum class PositionKind { Rotary, Learned };  // RoPE inside attention, or a learned table added to the embeddings

// rope_scaling: how the RoPE frequencies are changed (transformers' ROPE_INIT_FUNCTIONS).
struct RopeScaling {
  std::string type = "default";  // "default" (none), "linear", "llama3"
  double factor = 1.0;           // linear: positions / factor; llama3: low frequencies / factor
  double low_freq_factor = 1.0;  // llama3 only
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

struct ModelConfig {
  std::string path;        // the config.json it came from (for messages)
  std::string model_type;  // a row of architectures(): llama, mistral, qwen2, opt
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;   // MLP width (OPT: ffn_dim)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0; // defaults to num_attention_heads
  int64_t head_dim = 0;            // hidden_size / num_attention_heads unless given
  int64_t max_position_embeddings = 0;
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-6;          // llama: rms_norm_eps; OPT: nn.LayerNorm's 1e-5
  bool norm_affine = true;         // OPT layer_norm_elementwise_affine: false = no weight/bias
  PositionKind positions = PositionKind::Rotary;
  int64_t position_offset = 0;     // learned positions: table row = position + offset (OPT: 2)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  std::string hidden_act = "silu"; // silu: SwiGLU MLP (gate/up/down); relu: fc1 -> ReLU -> fc2
  bool tie_word_embeddings = false;// the head is the token embedding (one tensor, HF saves it once)
  bool qkv_bias = false;           // biases of q/k/v projections (llama attention_bias, qwen2)
  bool o_bias = false;             // bias of the attention output projection
  bool mlp_bias = false;           // biases of the MLP projections
  bool pre_norm = true;            // OPT do_layer_norm_before: false = post-LN blocks (opt-350m)
  bool final_norm = true;          // a norm after the last block
  int64_t word_embed_proj_dim = 0; // OPT: embeddings/head width; != hidden_size adds project_in/out
  int64_t sliding_window = 0;      // attention window (Mistral; Qwen2 with use_sliding_window); 0: none
  double residual_dropout = 0.0;   // OPT dropout: after the attention output and after fc2 (training only)
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;  // all of them when eos_token_id is a list (eos_token_id: the first)
  double initializer_range = 0.02; // std of the normal init (OPT: init_std)
  nlohmann::json raw;              // the whole file, written back unchanged by init/export
  // quantization_config of a model saved by bitsandbytes in 4 bits (load_in_4bit): how its
  // linear weights are stored (QLoRA's frozen base); disabled for a float model.
  QuantConfig quantization;
  std::string quantization_compute_dtype;  // its bnb_4bit_compute_dtype ("bfloat16", ...; "" if none)

  // Width of the token embeddings and the head's input (OPT's word_embed_proj_dim, else hidden).
  int64_t embed_dim() const { return word_embed_proj_dim > 0 ? word_embed_proj_dim : hidden_size; }
  bool projects_embeddings() const { return embed_dim() != hidden_size; }
};

// A QuantConfig in run.json and checkpoint manifests: {"type", "double_quant", "blocksize"};
// null (written before 4-bit bases existed) reads as none.
nlohmann::json quant_config_json(const QuantConfig& quant);
QuantConfig quant_config_from_json(const nlohmann::json& json, const std::string& where);

// Reads and validates DIR/config.json or a path to a config.json file.
ModelConfig load_model_config(const std::string& path);
// Validates an already parsed json (`where` names its origin in messages).
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& where);

// The longest sequence a model of this config can train on (max_position_embeddings for
// learned positions; the sliding window when there is one, since zerotune's attention has no
// window); a longer one is an error naming `what` (e.g. the data directory) and the key.
void check_sequence_length(const ModelConfig& config, int64_t seq_len, const std::string& what);

}  // namespace zt
