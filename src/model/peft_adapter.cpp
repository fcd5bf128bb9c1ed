// Reading PEFT LoRA adapters (adapter_config.json and adapter_model.safetensors).
#include "model/peft_adapter.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/parameter_plan.h"
#include "model/safetensors.h"

namespace zt {

namespace {
nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in, path, ": cannot open (a PEFT adapter directory needs adapter_config.json)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    fail(path, ": invalid JSON: ", error.what());
  }
}

// A key that must be absent, null, false, empty or equal to `neutral` for zerotune to train it.
void require_neutral(const nlohmann::json& config, const std::string& path, const std::string& key,
                     const nlohmann::json& neutral, const std::string& why) {
  if (!config.contains(key) || config[key].is_null() || config[key] == neutral) return;
  if ((config[key].is_object() || config[key].is_array()) && config[key].empty()) return;
  fail(path, ": key '", key, "' = ", config[key].dump(), " is not supported (", why, ")");
}
}  // namespace

LoraConfig read_peft_adapter_config(const std::string& adapter_dir) {
  const std::string path = (std::filesystem::path(adapter_dir) / "adapter_config.json").string();
  nlohmann::json config = read_json_file(path);
  try {
    const std::string peft_type = config.value("peft_type", std::string("LORA"));
    ZT_CHECK(peft_type == "LORA", path, ": peft_type '", peft_type, "' is not supported (only LORA)");
    require_neutral(config, path, "use_dora", false, "DoRA");
    require_neutral(config, path, "rank_pattern", nlohmann::json::object(), "per-module ranks");
    require_neutral(config, path, "alpha_pattern", nlohmann::json::object(), "per-module alphas");
    require_neutral(config, path, "bias", "none", "trained biases");
    require_neutral(config, path, "modules_to_save", nlohmann::json::array(), "fully trained extra modules");
    require_neutral(config, path, "layers_to_transform", nlohmann::json::array(), "layer subsets");
    require_neutral(config, path, "fan_in_fan_out", false, "Conv1D-style weights");
    LoraConfig lora;
    ZT_CHECK(config.contains("r"), path, ": key 'r' is missing");
    lora.r = config["r"].get<int>();
    lora.alpha = config.value("lora_alpha", 8.0);
    lora.dropout = config.value("lora_dropout", 0.0);
    lora.rslora = config.value("use_rslora", false);
    ZT_CHECK(config.contains("target_modules"), path, ": key 'target_modules' is missing");
    const nlohmann::json& targets = config["target_modules"];
    if (targets.is_string()) {  // "all-linear" or a regular expression (lora_targets.h matches it)
      lora.targets = {targets.get<std::string>()};
    } else {
      lora.targets = targets.get<std::vector<std::string>>();
    }
    ZT_CHECK(lora.r > 0, path, ": key 'r' must be positive, not ", lora.r);
    return lora;
  } catch (const nlohmann::json::exception& error) {
    fail(path, ": a key has the wrong type: ", error.what());
  }
}

void load_peft_adapter_weights(const std::string& adapter_dir, ParamStore& store, int unit) {
  const std::string path = (std::filesystem::path(adapter_dir) / "adapter_model.safetensors").string();
  ZT_CHECK(std::filesystem::exists(path), path, ": missing (adapter_model.bin is not read: convert it to safetensors)");
  SafetensorsFile file(path);
  size_t loaded = 0;
  for (const ParamEntry& entry : store.entries()) {
    const std::string& name = entry.spec.name;
    if (!is_lora_parameter(name)) continue;
    ++loaded;
    if (unit >= 0 && entry.unit != unit) continue;
    const std::string key = kPeftKeyPrefix + name;
    ZT_CHECK(file.contains(key), path, ": tensor '", key, "' is missing");
    ZT_CHECK(file.info(key).shape == entry.spec.shape, path, ": tensor '", key, "' has shape ",
             shape_string(file.info(key).shape), " but the model needs ", shape_string(entry.spec.shape));
    std::vector<float> host(static_cast<size_t>(entry.spec.numel()));
    file.read_as_f32(key, host.data());
    store.write_param(name, host.data());
  }
  ZT_CHECK(loaded == file.names().size(), path, ": holds ", file.names().size(), " tensors but the model has ", loaded,
           " adapter tensors (target modules or layers differ)");
}

void write_peft_adapter(const std::string& adapter_dir, const ParamStore& store, const LoraConfig& lora,
                        const std::vector<std::string>& target_modules, const std::string& base_model, DType dtype) {
  std::filesystem::create_directories(adapter_dir);
  // Host copies (the store may be on a GPU), alive until written; moving an inner vector when
  // the outer one grows keeps its data where the entry points.
  std::vector<std::vector<float>> host;
  std::vector<SafetensorsEntry> entries;
  for (const ParamEntry& entry : store.entries()) {
    if (!is_lora_parameter(entry.spec.name)) continue;
    host.push_back(store.read_param(entry.spec.name));
    entries.push_back({kPeftKeyPrefix + entry.spec.name, entry.spec.shape, host.back().data(), DType::F32, dtype});
  }
  ZT_CHECK(!entries.empty(), adapter_dir, ": the model has no LoRA adapters to write");
  write_safetensors((std::filesystem::path(adapter_dir) / "adapter_model.safetensors").string(), entries);
  const nlohmann::json config = {
      {"alpha_pattern", nlohmann::json::object()}, {"auto_mapping", nullptr},
      {"base_model_name_or_path", base_model}, {"bias", "none"}, {"fan_in_fan_out", false},
      {"inference_mode", true}, {"init_lora_weights", true}, {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr}, {"loftq_config", nlohmann::json::object()}, {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout}, {"megatron_config", nullptr}, {"megatron_core", "megatron.core"},
      {"modules_to_save", nullptr}, {"peft_type", "LORA"}, {"r", lora.r}, {"rank_pattern", nlohmann::json::object()},
      {"revision", nullptr}, {"target_modules", target_modules}, {"task_type", "CAUSAL_LM"}, {"use_dora", false},
      {"use_rslora", lora.rslora}};
  write_file_atomic((std::filesystem::path(adapter_dir) / "adapter_config.json").string(), config.dump(2) + "\n");
}

}  // namespace zt
