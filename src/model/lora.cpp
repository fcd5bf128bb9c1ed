// LoRA targeting, parameter lists and initialisation (PEFT semantics, see lora.h).
#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "model/architecture.h"
#include "model/lora_targets.h"

namespace zt {

namespace {
// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj"
std::string module_path(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - std::string(".weight").size());
}

// PEFT's all-linear: every nn.Linear but the output head (also the stem's and head's
// projections, e.g. OPT's project_in/out); a tied head is the embedding table, never adapted.
bool is_adaptable(const ParamSpec& spec) {
  return spec.role == ParamRole::Linear && spec.module != "lm_head" && !spec.tied();
}
}  // namespace

std::vector<std::string> lora_target_modules(const std::vector<ParamSpec>& specs, const LoraConfig& lora) {
  std::vector<std::string> modules = match_lora_targets(specs, lora.targets);  // PEFT's matching rules
  if (modules == std::vector<std::string>{"all-linear"}) {
    modules.clear();
    for (const ParamSpec& spec : specs)
      if (is_adaptable(spec) && std::find(modules.begin(), modules.end(), spec.module) == modules.end())
        modules.push_back(spec.module);
    std::sort(modules.begin(), modules.end());
  }
  return modules;
}

std::vector<ParamSpec> lora_param_specs(const std::vector<ParamSpec>& specs, const LoraConfig& lora) {
  ZT_CHECK(lora.r > 0, "LoRA rank must be positive (--lora-r ", lora.r, ")");
  std::vector<std::string> modules = lora_target_modules(specs, lora);
  std::vector<ParamSpec> adapters;
  for (const ParamSpec& spec : specs) {
    if (!is_adaptable(spec) || std::find(modules.begin(), modules.end(), spec.module) == modules.end()) continue;
    const std::string path = module_path(spec.name);
    const int64_t out = spec.shape[0], in = spec.shape[1];
    adapters.push_back({path + ".lora_A.weight", {lora.r, in}, ParamRole::Linear, spec.layer, spec.module, spec.unit, ""});
    adapters.push_back({path + ".lora_B.weight", {out, lora.r}, ParamRole::Linear, spec.layer, spec.module, spec.unit, ""});
  }
  return adapters;
}

LoraConfig lora_with_default_targets(LoraConfig lora, const ModelConfig& config) {
  if (lora.enabled() && lora.targets.empty()) lora.targets = architecture(config.model_type, config.path).lora_default_targets;
  // Suffixes and regular expressions become the module names they select (what run.json,
  // checkpoints and exported adapters record).
  if (lora.enabled()) lora.targets = match_lora_targets(model_param_specs(config), lora.targets);
  return lora;
}

float lora_scaling(const LoraConfig& lora) {
  return static_cast<float>(lora.rslora ? lora.alpha / std::sqrt(static_cast<double>(lora.r))
                                        : lora.alpha / static_cast<double>(lora.r));
}

void lora_init_a(float* a, int64_t rows, int64_t in_features, uint64_t seed, uint32_t adapter_index) {
  // kaiming_uniform_(a=sqrt(5)): gain = sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / fan_in) = 1/sqrt(fan_in).
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_features)));
  RngKey key{seed, rng_stream(RngPurpose::LoraInit, adapter_index), 0};
  for (int64_t i = 0; i < rows * in_features; ++i)
    a[i] = (2.0f * rng_uniform(key, static_cast<uint64_t>(i)) - 1.0f) * bound;
}

}  // namespace zt
