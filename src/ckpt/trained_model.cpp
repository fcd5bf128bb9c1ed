// A model with its trained weights for inference (trained_model.h).
#include "ckpt/trained_model.h"

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "model/lora.h"
#include "model/parameter_plan.h"
#include "model/peft_adapter.h"

namespace zt {

namespace {

using json = nlohmann::json;

// The weights in fp32 on the host: the base, then the checkpoint's or the adapter's.
std::unique_ptr<ParamStore> load_host_weights(const TrainedModelSource& source, TrainedModel& loaded) {
  QuantConfig quant = loaded.config.quantization;  // a bitsandbytes model directory's own 4-bit base
  json manifest;
  if (!source.checkpoint_dir.empty()) {
    manifest = read_checkpoint_manifest(source.checkpoint_dir, true);
    ZT_CHECK(model_structure_checksum(source.model_dir) == manifest.at("run").at("model_checksum").get<std::string>(),
             "--model ", source.model_dir, " is not the model the checkpoint ", source.checkpoint_dir,
             " was trained from (", manifest.at("run").at("model_dir").get<std::string>(),
             "): their structure checksums differ");
    loaded.lora = checkpoint_lora(manifest);
    const json& run_config = manifest.contains("config") ? manifest.at("config") : json();
    if (run_config.contains("quantize")) quant = quant_config_from_json(run_config.at("quantize"), source.checkpoint_dir);
  } else if (!source.adapter_dir.empty()) {
    loaded.lora = lora_with_default_targets(read_peft_adapter_config(source.adapter_dir), loaded.config);
  }
  const ParameterPlan plan = plan_parameters(loaded.config, loaded.lora, quant);
  auto store = std::make_unique<ParamStore>(*loaded.host, plan.specs, plan.trainable, 1, DType::F32, StoreResidency{},
                                            plan.quant);
  load_base_weights(source.model_dir, *store);
  if (!source.checkpoint_dir.empty()) load_full_master(source.checkpoint_dir, manifest, *store);
  if (!source.adapter_dir.empty()) load_peft_adapter_weights(source.adapter_dir, *store);
  return store;
}

}  // namespace

TrainedModel load_trained_model(const TrainedModelSource& source, Backend& backend, DType dtype) {
  ZT_CHECK(source.checkpoint_dir.empty() || source.adapter_dir.empty(), "give --checkpoint or --adapter, not both: a "
           "checkpoint holds its own trained weights (its adapters too, for a LoRA run)");
  TrainedModel loaded;
  loaded.config = load_model_config(source.model_dir);
  loaded.host = make_cpu_backend();
  loaded.dtype = dtype;
  std::unique_ptr<ParamStore> host_store = load_host_weights(source, loaded);
  if (backend.device() == Device::CPU && dtype == DType::F32) {
    loaded.store = std::move(host_store);
  } else {
    bool quantized = false;
    for (const ParamEntry& entry : host_store->entries()) quantized = quantized || entry.quant.enabled();
    ZT_CHECK(!quantized, source.model_dir, ": a 4-bit (QLoRA) base runs `generate` on the CPU in fp32 only (--device cpu "
             "--dtype fp32); or export the checkpoint with --merge and generate from the export");
    const ParameterPlan plan = plan_parameters(loaded.config, loaded.lora);
    loaded.store = std::make_unique<ParamStore>(backend, plan.specs, plan.trainable, 1, dtype);
    for (const ParamEntry& entry : host_store->entries())
      loaded.store->write_param(entry.spec.name, host_store->read_param(entry.spec.name).data());
  }
  ModelOptions options;
  if (loaded.lora.enabled()) options.lora_scaling = lora_scaling(loaded.lora);
  loaded.model = make_causal_lm(loaded.config, *loaded.store, backend, options);
  loaded.described = cat(source.model_dir, source.checkpoint_dir.empty() ? "" : " + checkpoint " + source.checkpoint_dir,
                         source.adapter_dir.empty() ? "" : " + adapter " + source.adapter_dir,
                         loaded.lora.enabled() ? cat(" (LoRA r ", loaded.lora.r, ")") : std::string());
  return loaded;
}

}  // namespace zt
