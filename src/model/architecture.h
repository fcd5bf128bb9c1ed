// The architecture table: one row per HF model_type, the one place that knows which model types
// exist. A row says how to read the family's config.json, which parameters it has (with their
// ZeRO units and ties), how to build its decoder blocks, and PEFT's default LoRA targets for it.
// Adding a family is one file (its parse function, parameter list and block) and one row.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/config_reader.h"
#include "model/decoder_blocks.h"
#include "model/param_spec.h"

namespace zt {

// How the family's HF checkpoint and config.json name what code outside its own file uses.
struct HfNaming {
  std::string decoder_prefix;  // before embed_tokens, layers, ...: "model." (LLaMA), "model.decoder." (OPT)
  std::string final_norm;      // the final norm's module: "model.norm", "model.decoder.final_layer_norm"
  std::string mlp_width_key;   // config.json's MLP width: "intermediate_size", "ffn_dim"
};

struct Architecture {
  std::string model_type;  // config.json "model_type"
  // Reads the family's keys into `config` (the common ones are already set: path, raw, model_type).
  void (*parse_config)(const ConfigReader& reader, ModelConfig& config);
  // HF state-dict keys and shapes in state-dict order, each with its ZeRO unit.
  std::vector<ParamSpec> (*param_specs)(const ModelConfig& config);
  // The family's L blocks over the parameters in `store`.
  std::unique_ptr<DecoderBlocks> (*make_blocks)(const ModelConfig& config, const ParamStore& store, Backend& backend,
                                                const BlockOptions& options);
  // PEFT's default target_modules for the model type (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
  std::vector<std::string> lora_default_targets;
  HfNaming naming;
};

// Every row, in the order messages list them.
const std::vector<Architecture>& architectures();
// The row of `model_type`; an unknown one is an error naming `where` (a config.json) and the
// supported types.
const Architecture& architecture(const std::string& model_type, const std::string& where);
// "llama, mistral, qwen2, opt"
std::string supported_model_types();

// LLaMA's naming, shared by the rows built on its blocks (Mistral, Qwen2): llama.cpp.
HfNaming llama_hf_naming();

// The rows, one per family file.
Architecture llama_architecture();    // llama.cpp
Architecture mistral_architecture();  // mistral.cpp
Architecture qwen2_architecture();    // qwen2.cpp
Architecture opt_architecture();      // opt.cpp

}  // namespace zt
