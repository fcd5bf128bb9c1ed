// One assembly of a run (see run_assembly.h).
#include "train/run_assembly.h"

#include <algorithm>

#include "backend/allocation_log.h"
#include "model/lora.h"
#include "optim/optimizer.h"
#include "pipe/stage_partition.h"

namespace zt {

namespace {

// Rank `stage`'s chunks of config.pipeline's partition of the plan's units over its P x V virtual
// stages (the whole model without one).
StageUnits stage_units_of(const TrainConfig& config, const ParameterPlan& plan, int stage) {
  if (!config.pipeline.enabled()) return {};
  const PartitionRule rule = parse_partition_method(config.pipeline.partition_method, "--partition-method");
  const int stages = static_cast<int>(config.pipeline.stages), chunks = static_cast<int>(config.pipeline.chunks);
  StageUnits units;
  units.bounds = partition_units(unit_weights(summarize_units(plan.specs, plan.trainable), rule), stages * chunks);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const size_t virtual_stage = static_cast<size_t>(chunk * stages + stage);
    units.chunks.push_back({units.bounds.at(virtual_stage), units.bounds.at(virtual_stage + 1)});
  }
  units.first_unit = units.chunks.front()[0];
  uint32_t adapter = 0;
  for (const ParamSpec& spec : plan.specs)
    if (spec.name.find(".lora_A.") != std::string::npos) units.adapter_index[spec.name] = adapter++;
  return units;
}

// The plan's parameters of the rank's chunks, renumbered as the store lays them out. A tie whose
// target is on another rank brings a copy of the target into a store unit of its own after the
// chunks' units (the copy keeps the target's name, so the weights load and the tie resolves as in
// the whole model; the tie's unit reads the copies' unit as the whole model's reads the target's).
// Every unit of the model thus has the whole model's layout in the store, which is what lets a
// checkpoint be the chunks' units one after the other, the copies left out (ckpt/checkpoint.h).
void keep_stage_units(ParameterPlan& plan, StageUnits& stage) {
  if (stage.chunks.empty()) return;
  const auto inside = [&](const ParamSpec& spec) {
    return std::any_of(stage.chunks.begin(), stage.chunks.end(),
                       [&](const std::array<int, 2>& c) { return spec.unit >= c[0] && spec.unit < c[1]; });
  };
  const auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < plan.specs.size(); ++i)
      if (plan.specs[i].name == name) return i;
    fail("pipeline: parameter ", name, " is tied to but not in the parameter list");
  };
  ParameterPlan kept;
  const auto keep = [&](size_t i, int store_unit) {
    kept.specs.push_back(plan.specs[i]);
    kept.specs.back().unit = store_unit;
    kept.trainable.push_back(plan.trainable[i]);
    kept.quant.push_back(plan.quant[i]);
  };
  const int copies_unit = stage.store_first(static_cast<int>(stage.chunks.size()));  // after the chunks' units
  for (size_t i = 0; i < plan.specs.size(); ++i) {
    const ParamSpec& spec = plan.specs[i];
    const bool tied_elsewhere = spec.tied() && !inside(plan.specs[index_of(spec.tied_to)]);
    if (!inside(spec)) {
      if (spec.tied() && inside(plan.specs[index_of(spec.tied_to)])) stage.tied_originals.push_back(spec.tied_to);
      continue;
    }
    if (tied_elsewhere) {
      keep(index_of(spec.tied_to), copies_unit);
      stage.tied_copies.push_back(spec.tied_to);
    }
    keep(i, stage.store_unit(spec.unit));
  }
  plan = std::move(kept);
}

}  // namespace

int StageUnits::store_first(int chunk) const {
  int first = 0;
  for (int c = 0; c < chunk; ++c) first += chunks.at(static_cast<size_t>(c))[1] - chunks[static_cast<size_t>(c)][0];
  return first;
}

int StageUnits::store_unit(int unit) const {
  for (size_t c = 0; c < chunks.size(); ++c)
    if (unit >= chunks[c][0] && unit < chunks[c][1]) return store_first(static_cast<int>(c)) + unit - chunks[c][0];
  if (chunks.empty()) return unit;
  fail("pipeline: unit ", unit, " is on no chunk of this rank");
}

std::vector<int> StageUnits::model_units() const {
  std::vector<int> units;
  if (chunks.empty()) return units;
  for (const std::array<int, 2>& chunk : chunks)
    for (int unit = chunk[0]; unit < chunk[1]; ++unit) units.push_back(unit);
  if (!tied_copies.empty()) units.push_back(-1);  // the copies' unit (keep_stage_units)
  return units;
}

ModelOptions model_options_of(const TrainConfig& config, const StageUnits& stage, int chunk) {
  ModelOptions options;
  if (!stage.chunks.empty()) {
    options.first_unit = stage.chunks.at(static_cast<size_t>(chunk))[0];
    options.end_unit = stage.chunks[static_cast<size_t>(chunk)][1];
    options.store_first_unit = stage.store_first(chunk);
  }
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
  if (config.pipeline.enabled()) return {StepInstruction{StepOp::PipelineStage, 0}};  // train/pipe_engine.h
  if (!optimizer.fuses_into_backward()) return gradient_accumulation_schedule(config.gradient_accumulation_steps);
  return fused_update_schedule(config.gradient_accumulation_steps,
                               config.gradient_clipping > 0.0 || config.compute_dtype == DType::F16);
}

RunParts assemble_run(const TrainConfig& config, const ModelConfig& model_config, Backend& backend, Communicator& comm,
                      Communicator* host_comm, int world_size, const UnitWeights& weights,
                      AssemblyObserver* observer, int pipeline_stage) {
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
  parts.stage = stage_units_of(config, parts.plan, pipeline_stage);
  keep_stage_units(parts.plan, parts.stage);
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
    if (weights) weights(*parts.store, unit, parts.stage);
    parts.engine->init_unit_from_store(unit);
  }
  parts.engine->finish_init();
  observe.before_model(*parts.store, *parts.engine);
  parts.model = make_causal_lm(model_config, *parts.store, backend, model_options_of(config, parts.stage));
  parts.model->set_unit_hooks(parts.engine.get());
  for (size_t chunk = 1; chunk < parts.stage.chunks.size(); ++chunk) {
    parts.more_chunks.push_back(make_causal_lm(model_config, *parts.store, backend,
                                               model_options_of(config, parts.stage, static_cast<int>(chunk))));
    parts.more_chunks.back()->set_unit_hooks(parts.engine.get());
  }
  parts.objective->attach(*parts.model, *parts.store, backend);
  if (parts.objective->needs_frozen_reference(config)) {
    observe.before_reference();
    // The whole model's weights (the pipeline refuses objectives other than sft: parts.stage is all units).
    std::function<void(ParamStore&, int)> load_reference;
    if (weights) load_reference = [&](ParamStore& store, int unit) { weights(store, unit, parts.stage); };
    parts.reference = std::make_unique<FrozenReference>(build_frozen_reference(
        config, model_config, parts.plan, backend, comm, world_size, load_reference,
        [&](ParamStore& store, ZeroEngine& engine) { observe.before_reference_model(store, engine); }));
    parts.objective->attach_reference(*parts.reference->model);
  }
  if (config.compute_dtype == DType::F16) parts.scaler.emplace(config.loss_scaler);  // bf16, fp32: unscaled (DeepSpeed)
  parts.schedule = run_schedule(config, parts.engine->optimizer());
  log_allocation_mark(backend, "assembled");
  return parts;
}

}  // namespace zt
