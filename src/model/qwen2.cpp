// Qwen2 (Qwen2ForCausalLM): LLaMA blocks (llama.h) with Qwen2Config's defaults and biases on the
// q/k/v projections (not on o_proj or the MLP). Qwen2 uses a sliding window only with
// use_sliding_window (off in every released Qwen2 config); zerotune's attention has no window,
// so with it on, a sequence longer than sliding_window is refused (check_sequence_length).
#include "model/architecture.h"
#include "model/llama.h"

namespace zt {

namespace {

void parse_qwen2(const ConfigReader& reader, ModelConfig& config) {
  // transformers.Qwen2Config's defaults, where they are not LlamaConfig's; it sets no token ids
  // (PretrainedConfig's None).
  parse_llama_family(reader, config,
                     {.vocab_size = 151936, .intermediate_size = 22016, .max_position_embeddings = 32768,
                      .bos_token_id = std::nullopt, .eos_token_id = std::nullopt});
  config.qkv_bias = true;
  if (reader.boolean("use_sliding_window", false))
    config.sliding_window = reader.optional_positive_integer("sliding_window").value_or(4096);
}

}  // namespace

Architecture qwen2_architecture() {
  return {"qwen2", parse_qwen2, llama_param_specs, make_llama_blocks, {"q_proj", "v_proj"}, llama_hf_naming()};
}

}  // namespace zt
