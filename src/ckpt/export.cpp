// Export of a checkpoint to HF safetensors, a PEFT adapter or DeepSpeed-Chat's reward-model layout.
#include "ckpt/export.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "ckpt/export_reward.h"
#include "ckpt/torch_state_dict.h"
#include "model/lora.h"
#include "model/parameter_plan.h"
#include "model/peft_adapter.h"
#include "model/safetensors.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Files of an HF model directory besides the weights that a loader needs (tokenizer, generation).
constexpr const char* kCompanionFiles[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "vocab.json", "merges.txt",
                                           "added_tokens.json", "generation_config.json"};

// The base weights as dense fp32 views: the store's own, or a 4-bit base dequantized into
// host memory (QLoRA: the merged model is dequantized, as PEFT's merge_and_unload computes it).
class DenseWeights {
 public:
  explicit DenseWeights(ParamStore& store) : store_(store) {}
  Tensor weight(const std::string& name) {
    if (!store_.quantized(name)) return store_.param(name);
    std::vector<float>& host = dequantized_[name];
    if (host.empty()) host = store_.read_param(name);
    const std::vector<int64_t>& shape = store_.entry(name).spec.shape;  // [out, in]
    return Tensor(host.data(), DType::F32, {shape[0], shape[1]});
  }

 private:
  ParamStore& store_;
  std::map<std::string, std::vector<float>> dequantized_;
};

// W[out, in] += scaling * B[out, r] A[r, in] for every adapted linear, through the CPU backend's GEMM.
void merge_lora(Backend& backend, ParamStore& store, DenseWeights& dense, float scaling) {
  for (const ParamEntry& entry : store.entries()) {
    const std::string& name = entry.spec.name;
    const size_t at = name.find(".lora_A.weight");
    if (at == std::string::npos) continue;
    const std::string module = name.substr(0, at);
    backend.matmul(dense.weight(module + ".weight"), store.param(module + ".lora_B.weight"), false,
                   store.param(name), false, scaling, 1.0f);
  }
}

void write_hf_config(const std::string& model_dir, const std::string& out_dir, DType dtype) {
  const fs::path source = fs::path(model_dir) / "config.json";
  std::ifstream in(source);
  ZT_CHECK(in, source.string(), ": cannot open");
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& error) {
    fail(source.string(), ": invalid JSON: ", error.what());
  }
  config.erase("quantization_config");  // a 4-bit base is written dequantized
  config["torch_dtype"] = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  write_file_atomic((fs::path(out_dir) / "config.json").string(), config.dump(2) + "\n");
}

// --dtype, or with auto the dtype the run computed in (its manifest's config).
DType export_dtype(const ExportOptions& options, const json& manifest, std::string& origin) {
  if (options.dtype) {
    origin = "as asked";
    return *options.dtype;
  }
  const json* config = manifest.contains("config") ? &manifest.at("config") : nullptr;
  if (config == nullptr || !config->contains("compute_dtype")) {
    origin = "auto: the checkpoint records no compute dtype";
    return DType::F32;
  }
  origin = "auto: the run's compute dtype";
  return parse_compute_dtype(config->at("compute_dtype").get<std::string>());
}

// The format's name of each parameter ("" leaves it out): HF's own names, a reward model's
// ...ForSequenceClassification names, or DeepSpeed-Chat's RewardModel names.
std::string exported_name(const std::string& format, bool reward_model, const std::string& name) {
  if (format == "dschat") return deepspeed_chat_reward_name(name);
  return reward_model ? sequence_classification_name(name) : name;
}

// What the format refuses of this checkpoint, before anything is read or written.
void check_export_format(const ExportOptions& options, const LoraConfig& lora, bool reward_model) {
  ZT_CHECK(options.format != "peft" || lora.enabled(), options.checkpoint_dir,
           " is a full fine-tuning checkpoint: there is no adapter to write as --format peft (use --format hf)");
  ZT_CHECK(options.format != "peft" || !options.merge, "--merge applies to --format hf and dschat (PEFT adapters stay separate)");
  ZT_CHECK(options.format == "peft" || !lora.enabled() || options.merge, options.checkpoint_dir, " is a LoRA checkpoint: --format ",
           options.format, " needs --merge (its model files have no adapters)", options.format == "hf" ? ", or use --format peft" : "");
  ZT_CHECK(!reward_model || options.format != "peft", options.checkpoint_dir, " is a reward model: its value head is no ",
           "part of a PEFT adapter; export it with --format hf", lora.enabled() ? " --merge" : "",
           " (a ...ForSequenceClassification) or --format dschat");
  ZT_CHECK(options.format != "dschat" || reward_model, options.checkpoint_dir, " is not a reward model (train --objective ",
           "reward): --format dschat writes DeepSpeed-Chat's step-2 layout; its step 3 reads a step-1 model with ",
           "from_pretrained, which --format hf serves");
}

}  // namespace

std::string export_checkpoint(const ExportOptions& options) {
  ZT_CHECK(options.format == "hf" || options.format == "peft" || options.format == "dschat",
           "--format must be hf, peft or dschat, not '", options.format, "'");
  ZT_CHECK(!options.dtype || *options.dtype == DType::F32 || *options.dtype == DType::BF16 || *options.dtype == DType::F16,
           "--dtype must be fp32, bf16, fp16 or auto");
  const json manifest = read_checkpoint_manifest(options.checkpoint_dir, true);
  std::string dtype_origin;
  const DType dtype = export_dtype(options, manifest, dtype_origin);
  const std::string in_dtype = cat(" in ", dtype_name(dtype), " (", dtype_origin, ")");
  const std::string checksum = model_structure_checksum(options.model_dir);
  ZT_CHECK(checksum == manifest.at("run").at("model_checksum").get<std::string>(), "--model ", options.model_dir,
           " is not the model the checkpoint ", options.checkpoint_dir, " was trained from (",
           manifest.at("run").at("model_dir").get<std::string>(), "): their structure checksums differ");
  const LoraConfig lora = checkpoint_lora(manifest);
  const ModelConfig model_config = load_model_config(options.model_dir);
  // QLoRA: the base stored 4-bit as the run stored it (its bits are what the adapters learned on).
  const json& run_config = manifest.contains("config") ? manifest.at("config") : json();
  const QuantConfig quant =
      quant_config_from_json(run_config.contains("quantize") ? run_config.at("quantize") : json(), options.checkpoint_dir);
  ParameterPlan plan = plan_parameters(model_config, lora, quant);
  // A reward model (--objective reward): exported as ...ForSequenceClassification (export_reward.h).
  const bool reward_model = add_checkpoint_value_head(plan, model_config, manifest);
  check_export_format(options, lora, reward_model);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  ParamStore store(*backend, plan.specs, plan.trainable, 1, DType::F32, {}, plan.quant);
  load_base_weights(options.model_dir, store);
  load_full_master(options.checkpoint_dir, manifest, store);
  fs::create_directories(options.out_dir);

  if (options.format == "peft") {
    write_peft_adapter(options.out_dir, store, lora, lora_target_modules(model_param_specs(model_config), lora),
                       fs::absolute(options.model_dir).string(), dtype);
    return cat("wrote the PEFT adapter of ", options.checkpoint_dir, " (r ", lora.r, ", step ",
               manifest.at("step").get<int64_t>(), ") to ", options.out_dir, in_dtype);
  }
  DenseWeights dense(store);
  if (lora.enabled()) merge_lora(*backend, store, dense, lora_scaling(lora));
  std::vector<SafetensorsEntry> entries;
  for (const ParamEntry& entry : store.entries()) {
    const std::string name = exported_name(options.format, reward_model, entry.spec.name);
    if (!is_lora_parameter(entry.spec.name) && !name.empty())
      entries.push_back({name, entry.spec.shape, dense.weight(entry.spec.name).data, DType::F32, dtype});
  }
  std::vector<std::string> files{"pytorch_model.bin"};
  if (options.format == "dschat") write_torch_state_dict((fs::path(options.out_dir) / files[0]).string(), entries);
  else if (options.max_shard_bytes > 0) files = write_sharded_safetensors(options.out_dir, entries, options.max_shard_bytes);
  else files = write_sharded_safetensors(options.out_dir, entries);
  write_hf_config(options.model_dir, options.out_dir, dtype);
  if (reward_model && options.format == "hf") write_sequence_classification_config(options.out_dir);
  for (const char* name : kCompanionFiles) {
    const fs::path source = fs::path(options.model_dir) / name;
    if (fs::exists(source)) fs::copy_file(source, fs::path(options.out_dir) / name, fs::copy_options::overwrite_existing);
  }
  const char* what = options.format == "dschat" ? "DeepSpeed-Chat reward model (RewardModel state dict)"
                     : reward_model           ? "HF reward model (...ForSequenceClassification)"
                                              : "HF model";
  return cat("wrote the ", what, " of ", options.checkpoint_dir, " (step ", manifest.at("step").get<int64_t>(),
             lora.enabled() ? ", LoRA merged" : "", ") to ", options.out_dir, " in ", files.size(), " weight file(s)",
             in_dtype);
}

}  // namespace zt
