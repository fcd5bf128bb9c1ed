// The LLaMA family's block and parameter list, shared by the rows whose models are LLaMA blocks
// with other defaults or biases (llama.cpp, mistral.cpp, qwen2.cpp).
#pragma once
#include <memory>
#include <vector>

#include "model/config_reader.h"
#include "model/decoder_blocks.h"
#include "model/param_spec.h"

namespace zt {

// The defaults of a transformers config class of the family (LlamaConfig, MistralConfig, ...).
struct LlamaFamilyDefaults {
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008, num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> bos_token_id = 1, eos_token_id = 2;
};

// The keys every LLaMA-family config shares: sizes, GQA, RMSNorm eps, RoPE (theta, rope_scaling),
// hidden_act (SwiGLU with silu), tie_word_embeddings, attention_dropout (must be 0), token ids.
void parse_llama_family(const ConfigReader& reader, ModelConfig& config, const LlamaFamilyDefaults& defaults);

// HF LlamaForCausalLM keys (MistralForCausalLM and Qwen2ForCausalLM have the same), state-dict
// order; biases where config.qkv_bias / o_bias / mlp_bias say; no lm_head.weight of its own
// when tied. Units: embedding 0, block l at l+1, final norm + head L+1 (the tied head reads
// unit 0).
std::vector<ParamSpec> llama_param_specs(const ModelConfig& config);

// RMSNorm -> attention (RoPE, GQA) -> residual -> RMSNorm -> SwiGLU MLP -> residual.
std::unique_ptr<DecoderBlocks> make_llama_blocks(const ModelConfig& config, const ParamStore& store, Backend& backend,
                                                 const BlockOptions& options);

// RoPE's inverse frequencies inv_freq[D/2] in fp32 as transformers computes them, with
// config.rope_scaling applied (linear: / factor; llama3: the wavelength-dependent rule).
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace zt
