// One assembly of a run (see run_assembly.h).
#include "train/run_assembly.h"

#include "backend/allocation_log.h"
#include "model/lora.h"
#include "optim/optimizer.h"

namespace zt {

ModelOptions model_options_of(const TrainConfig& config) {
  ModelOptions options;
  options.activation_checkpointing = config.activation_checkpointing;
  options.offload_activations = config.offload_activations;
  options.head_chunk_rows = config.head_chunk_rows;
  if (config.lora.enabled()) {
    options.lora_scaling = lora_scaling(config.lora);
    options.lora_dropout = static_cast<float>(config.lora.dropout);
  }
  return options;
}

StepConfig step_config_of(const TrainConfig& config) {
  return StepConfig{config.seed, config.optimizer.lr, config.scheduler, config.gradient_clipping,
                    config.dump_step0_path};
}

std::vector<StepInstruction> run_schedule(const TrainConfig& config, const Optimizer& optimizer) {
  if (!optimizer.fuses_into_backward()) return gradient_accumulation_schedule(config.gradient_accumulation_steps);
  return fused_update_schedule(config.gradient_accumulation_steps,
                               config.gradient_clipping > 0.0 || config.compute_dtype == DType::F16);
}

RunParts assemble_run(const TrainConfig& config, const ModelConfig& model_config, Backend& backend, Communicator& comm,
                      Communicator* host_comm, int world_size, const UnitWeights& weights,
                      AssemblyObserver* observer) {
  AssemblyObserver nothing;
  AssemblyObserver& observe = observer ? *observer : nothing;
  log_allocation_mark(backend, "assemble");
  RunParts parts;
  parts.objective = make_objective(config);
  parts.plan = plan_parameters(model_config, config.lora, config.quantize);
  for (ParamSpec& spec : parts.objective->added_params(model_config)) {  // trainable under LoRA too
    parts.plan.specs.push_back(std::move(spec));
    parts.plan.trainable.push_back(true);
    parts.plan.quant.push_back(QuantConfig{});
  }
  parts.residency = zero_store_residency(config.zero, world_size, *make_optimizer(config.optimizer));
  observe.before_store();
  parts.store = std::make_unique<ParamStore>(backend, parts.plan.specs, parts.plan.trainable, world_size,
                                             config.compute_dtype, parts.residency, parts.plan.quant,
                                             config.grad_accum_dtype);
  observe.before_engine();
  parts.engine = std::make_unique<ZeroEngine>(backend, comm, *parts.store, config.zero, config.optimizer,
                                              config.compute_dtype, host_comm);
  for (int unit = 0; unit < parts.store->num_units(); ++unit) {
    if (!parts.residency.params) parts.store->commit_unit_params(unit);
    if (weights) weights(*parts.store, unit);
    parts.engine->init_unit_from_store(unit);
  }
  parts.engine->finish_init();
  observe.before_model(*parts.store, *parts.engine);
  parts.model = make_causal_lm(model_config, *parts.store, backend, model_options_of(config));
  parts.model->set_unit_hooks(parts.engine.get());
  parts.objective->attach(*parts.model, *parts.store, backend);
  if (parts.objective->needs_frozen_reference(config)) {
    observe.before_reference();
    parts.reference = std::make_unique<FrozenReference>(build_frozen_reference(
        config, model_config, parts.plan, backend, comm, world_size, weights,
        [&](ParamStore& store, ZeroEngine& engine) { observe.before_reference_model(store, engine); }));
    parts.objective->attach_reference(*parts.reference->model);
  }
  if (config.compute_dtype == DType::F16) parts.scaler.emplace(config.loss_scaler);  // bf16, fp32: unscaled (DeepSpeed)
  parts.schedule = run_schedule(config, parts.engine->optimizer());
  log_allocation_mark(backend, "assembled");
  return parts;
}

}  // namespace zt
