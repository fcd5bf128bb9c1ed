// Parameter lists per architecture (HF LlamaForCausalLM key names and shapes, in the order of
// its state_dict, which is also the order save_pretrained fills shards in).
#include "model/param_spec.h"

#include "core/error.h"

namespace zt {

int64_t ParamSpec::numel() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

namespace {

std::vector<ParamSpec> llama_param_specs(const ModelConfig& c) {
  const int64_t q_out = c.num_attention_heads * c.head_dim;
  const int64_t kv_out = c.num_key_value_heads * c.head_dim;
  std::vector<ParamSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, ParamRole::Embedding, -1, "embed_tokens"});
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string prefix = cat("model.layers.", layer, ".");
    auto linear = [&](const std::string& block, const std::string& module, int64_t out, int64_t in, bool bias) {
      specs.push_back({prefix + block + module + ".weight", {out, in}, ParamRole::Linear, layer, module});
      if (bias) specs.push_back({prefix + block + module + ".bias", {out}, ParamRole::Bias, layer, module});
    };
    linear("self_attn.", "q_proj", q_out, c.hidden_size, c.attention_bias);
    linear("self_attn.", "k_proj", kv_out, c.hidden_size, c.attention_bias);
    linear("self_attn.", "v_proj", kv_out, c.hidden_size, c.attention_bias);
    linear("self_attn.", "o_proj", c.hidden_size, q_out, c.attention_bias);
    linear("mlp.", "gate_proj", c.intermediate_size, c.hidden_size, c.mlp_bias);
    linear("mlp.", "up_proj", c.intermediate_size, c.hidden_size, c.mlp_bias);
    linear("mlp.", "down_proj", c.hidden_size, c.intermediate_size, c.mlp_bias);
    specs.push_back({prefix + "input_layernorm.weight", {c.hidden_size}, ParamRole::NormWeight, layer, ""});
    specs.push_back({prefix + "post_attention_layernorm.weight", {c.hidden_size}, ParamRole::NormWeight, layer, ""});
  }
  specs.push_back({"model.norm.weight", {c.hidden_size}, ParamRole::NormWeight, -1, ""});
  if (!c.tie_word_embeddings)
    specs.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, ParamRole::Linear, -1, "lm_head"});
  return specs;
}

}  // namespace

std::vector<ParamSpec> model_param_specs(const ModelConfig& config) {
  if (config.model_type == "llama") return llama_param_specs(config);
  fail(config.path, ": model_type '", config.model_type, "' has no parameter layout");
}

}  // namespace zt
