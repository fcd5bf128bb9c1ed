// PEFT LoRA adapter directories (adapter_config.json + adapter_model.safetensors): reading one
// to continue training it (--adapter), writing one (export --format peft). Keys in the weights file are PEFT's:
// "base_model.model." + "<module path>.lora_A.weight" (no adapter name).
#pragma once
#include <string>

#include "model/param_store.h"
#include "model/lora_config.h"

namespace zt {

inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

// The LoRA settings an adapter was made with (r, lora_alpha, lora_dropout, target_modules,
// use_rslora). Settings zerotune does not implement (DoRA, rank/alpha patterns, trained biases,
// modules_to_save, layers_to_transform, fan_in_fan_out) are errors naming the file and key.
LoraConfig read_peft_adapter_config(const std::string& adapter_dir);

// Copies every lora_A/lora_B of `store` from the adapter's weights file; a missing tensor, a
// wrong shape or a tensor the model has no place for is an error naming the file.
// `unit` >= 0: only that unit's adapters (the tensor count is checked against the whole store).
void load_peft_adapter_weights(const std::string& adapter_dir, ParamStore& store, int unit = -1);

// Writes adapter_config.json (PEFT 0.10's keys; target_modules resolved to module names) and
// adapter_model.safetensors (every lora_A/lora_B of `store` stored as `dtype`) into adapter_dir.
void write_peft_adapter(const std::string& adapter_dir, const ParamStore& store, const LoraConfig& lora,
                        const std::vector<std::string>& target_modules, const std::string& base_model, DType dtype);

}  // namespace zt
