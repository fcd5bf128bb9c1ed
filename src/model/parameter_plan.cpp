// Parameter plans, base-weight loading and LoRA initialisation.
#include "model/parameter_plan.h"

#include <algorithm>
#include <cmath>

#include "core/fault_injection.h"
#include "model/bnb_4bit.h"
#include "model/lora.h"
#include "model/safetensors.h"

namespace zt {

ParameterPlan plan_parameters(const ModelConfig& model_config, const LoraConfig& requested_lora,
                              const QuantConfig& quant) {
  const LoraConfig lora = lora_with_default_targets(requested_lora, model_config);
  ZT_CHECK(!quant.enabled() || lora.enabled(), "a ", quant4_type_name(quant.type),
           " (4-bit) base is frozen: QLoRA trains LoRA adapters on it, so give --lora-r (4-bit weights get no gradient)");
  ParameterPlan plan;
  plan.specs = model_param_specs(model_config);
  plan.trainable.assign(plan.specs.size(), !lora.enabled());  // LoRA freezes every base weight
  plan.quant.assign(plan.specs.size(), QuantConfig{});
  for (size_t i = 0; i < plan.specs.size(); ++i) {
    const ParamSpec& spec = plan.specs[i];
    if (quant.enabled() && spec.role == ParamRole::Linear && !spec.tied() && spec.module != "lm_head") plan.quant[i] = quant;
  }
  if (lora.enabled()) {
    for (ParamSpec& adapter : lora_param_specs(plan.specs, lora)) {
      plan.specs.push_back(std::move(adapter));
      plan.trainable.push_back(true);
      plan.quant.push_back(QuantConfig{});
    }
  }
  return plan;
}

bool is_lora_parameter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

void load_base_weights(const std::string& model_dir, ParamStore& store, int unit) {
  ModelWeights weights(model_dir);
  for (const ParamEntry& entry : store.entries()) {
    const std::string& name = entry.spec.name;
    if (is_lora_parameter(name) || !entry.spec.owner.empty() || (unit >= 0 && entry.unit != unit))
      continue;  // (tied names have no entry; an objective's parameters are its own to fill)
    if (entry.quant.enabled() && has_bnb_4bit(weights, name)) {  // saved 4-bit by bitsandbytes: loaded as it is
      store.write_payload(name, read_bnb_4bit(weights, name, entry.spec.shape, entry.quant).data());
      continue;
    }
    const std::string stored = weights.stored_name(name);
    ZT_CHECK(!stored.empty(), weights.source(), ": tensor '", name, "' is missing (the config needs it)");
    ZT_CHECK(weights.info(stored).dtype != "U8", weights.source(), ": tensor '", stored, "' is uint8 without a ",
             "bitsandbytes quant_state: a 4-bit checkpoint needs its quantization_config in config.json");
    std::vector<float> host(static_cast<size_t>(entry.spec.numel()));  // via the host: the store may be on a GPU
    weights.read_f32(stored, host.data(), entry.spec.shape);
    // A NaN or Inf in the weights would only show as a NaN loss steps later, named by nothing.
    const auto bad = std::find_if(host.begin(), host.end(), [](float v) { return !std::isfinite(v); });
    ZT_CHECK(bad == host.end(), weights.source(), ": tensor '", stored, "' holds ", *bad == *bad ? "an infinite value" : "NaN",
             " at element ", bad - host.begin(), " (of ", host.size(), "): the model file is damaged");
    store.write_param(name, host.data());  // a 4-bit entry is quantized here, one tensor at a time
  }
  fault_point("load", unit);
}

void init_lora_weights(ParamStore& store, uint64_t seed, int unit, const std::map<std::string, uint32_t>& adapter_index) {
  uint32_t next_index = 0;  // over all adapters, so one unit's draws equal a whole load's
  for (const ParamEntry& entry : store.entries()) {
    if (entry.spec.name.find(".lora_A.") == std::string::npos) continue;
    const uint32_t index = adapter_index.empty() ? next_index++ : adapter_index.at(entry.spec.name);
    if (unit >= 0 && entry.unit != unit) continue;
    const std::vector<int64_t>& shape = entry.spec.shape;  // [r, in]
    std::vector<float> a(static_cast<size_t>(entry.spec.numel()));
    lora_init_a(a.data(), shape[0], shape[1], seed, index);
    store.write_param(entry.spec.name, a.data());
  }
}

}  // namespace zt
