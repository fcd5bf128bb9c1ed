// Mistral (MistralForCausalLM): LLaMA blocks (llama.h) with MistralConfig's defaults (GQA with 8
// key/value heads) and a sliding attention window. zerotune's attention has no window, so a
// sequence longer than sliding_window is refused (check_sequence_length); up to the window the
// windowed and the plain causal attention are the same.
#include "model/architecture.h"
#include "model/llama.h"

namespace zt {

namespace {

void parse_mistral(const ConfigReader& reader, ModelConfig& config) {
  // transformers.MistralConfig's defaults, where they are not LlamaConfig's.
  parse_llama_family(reader, config,
                     {.intermediate_size = 14336, .num_key_value_heads = 8, .max_position_embeddings = 4096 * 32});
  // Mistral's projections have no biases (attention_bias / mlp_bias are not MistralConfig keys).
  // Missing: MistralConfig's 4096; null: no window (Mistral v0.2 and later).
  config.sliding_window = reader.optional_positive_integer("sliding_window").value_or(reader.present("sliding_window") ? 0 : 4096);
}

}  // namespace

Architecture mistral_architecture() {
  return {"mistral", parse_mistral, llama_param_specs, make_llama_blocks, {"q_proj", "v_proj"}, llama_hf_naming()};
}

}  // namespace zt
