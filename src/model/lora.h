// LoRA with PEFT semantics: which linear modules get adapters, the adapter parameters' names
// and shapes, their scaling and their initialisation.
//   y = x W^T + (dropout(x) A^T B^T) * scaling,  A [r, in], B [out, r],
//   scaling = alpha / r (alpha / sqrt(r) with rsLoRA); A kaiming-uniform(a=sqrt(5)), B = 0.
#pragma once
#include <string>
#include <vector>

#include "model/param_spec.h"
#include "model/lora_config.h"

namespace zt {

// Module names of the linear layers LoRA may target in a model (e.g. q_proj ... down_proj).
// "all-linear" means all of them except the output head, as in PEFT.
std::vector<std::string> lora_target_modules(const std::vector<ParamSpec>& specs, const LoraConfig& lora);

// The adapter parameters (lora_A, lora_B) for every targeted Linear weight in `specs`, named
// "<module path>.lora_A.weight" (PEFT's key without "base_model.model." and adapter name).
std::vector<ParamSpec> lora_param_specs(const std::vector<ParamSpec>& specs, const LoraConfig& lora);

// `lora` with PEFT's default target modules of the model type (its architecture row) when it
// names none (LoRA on and targets empty); otherwise unchanged.
LoraConfig lora_with_default_targets(LoraConfig lora, const ModelConfig& config);

float lora_scaling(const LoraConfig& lora);

// PEFT's initial lora_A: kaiming_uniform_(a=sqrt(5)) on [r, in] = U(-1/sqrt(in), 1/sqrt(in)),
// drawn from the counter-based RNG keyed by (seed, LoraInit, adapter index).
void lora_init_a(float* a, int64_t rows, int64_t in_features, uint64_t seed, uint32_t adapter_index);

}  // namespace zt
