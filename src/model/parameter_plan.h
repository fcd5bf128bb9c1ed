// The parameters of a run: the model's HF parameters plus the LoRA adapters when LoRA is on
// (which then freezes every base weight), loading the base weights into a ParamStore and PEFT's
// fresh adapter initialisation. Shared by `train` and `export`.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/param_spec.h"
#include "model/param_store.h"
#include "model/lora_config.h"

namespace zt {

struct ParameterPlan {
  std::vector<ParamSpec> specs;  // HF order, then the adapters
  std::vector<bool> trainable;   // per spec
  std::vector<QuantConfig> quant;  // per spec: enabled for the base weights stored 4-bit (QLoRA)
};

// `quant` enabled (QLoRA; needs LoRA): every frozen linear weight but the output head is stored
// 4-bit, as transformers' bitsandbytes integration quantizes nn.Linear modules except lm_head.
ParameterPlan plan_parameters(const ModelConfig& model_config, const LoraConfig& lora, const QuantConfig& quant = {});

bool is_lora_parameter(const std::string& name);

// Reads every non-adapter parameter of the store from the model directory's safetensors.
// `unit` >= 0: only that unit's parameters (a store loaded unit by unit; param_store.h).
void load_base_weights(const std::string& model_dir, ParamStore& store, int unit = -1);

// PEFT's fresh adapter: A kaiming-uniform (RNG keyed by seed and adapter index), B zeros (the
// store starts zeroed). `adapter_index`: each lora_A's index in the whole model, where the store
// holds only some of them (a pipeline stage's); empty: the store's own order.
void init_lora_weights(ParamStore& store, uint64_t seed, int unit = -1,
                       const std::map<std::string, uint32_t>& adapter_index = {});

}  // namespace zt
