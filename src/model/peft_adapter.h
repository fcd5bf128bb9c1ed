// PEFT LoRA adapter directories (adapter_config.json + adapter_model.safetensors): reading one
// to continue training it (--adapter). Keys in the weights file are PEFT's:
// "base_model.model." + "<module path>.lora_A.weight" (no adapter name).
#pragma once
#include <string>

#include "model/param_store.h"
#include "train/train_config.h"

namespace zt {

inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

// The LoRA settings an adapter was made with (r, lora_alpha, lora_dropout, target_modules,
// use_rslora). Settings zerotune does not implement (DoRA, rank/alpha patterns, trained biases,
// modules_to_save, layers_to_transform, fan_in_fan_out) are errors naming the file and key.
LoraConfig read_peft_adapter_config(const std::string& adapter_dir);

// Copies every lora_A/lora_B of `store` from the adapter's weights file; a missing tensor, a
// wrong shape or a tensor the model has no place for is an error naming the file.
void load_peft_adapter_weights(const std::string& adapter_dir, ParamStore& store);

}  // namespace zt
