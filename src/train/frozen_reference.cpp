// A frozen copy of the initial weights (see frozen_reference.h).
#include "train/frozen_reference.h"

#include <vector>

#include "optim/optimizer.h"

namespace zt {

FrozenReference build_frozen_reference(const TrainConfig& config, const ModelConfig& model_config,
                                       const ParameterPlan& plan, Backend& backend, Communicator& comm,
                                       int world_size, const std::function<void(ParamStore&, int)>& load,
                                       const std::function<void(ParamStore&, ZeroEngine&)>& before_model) {
  // The run's ZeRO layout for the parameters; nothing of an optimizer: it never steps.
  ZeroConfig zero = config.zero;
  zero.offload_optimizer_device = "none";
  const OptimizerConfig no_optimizer;  // AdamW's defaults: no state is allocated without trainable parameters
  FrozenReference reference;
  const std::vector<bool> frozen(plan.specs.size(), false);
  const StoreResidency residency = zero_store_residency(zero, world_size, *make_optimizer(no_optimizer));
  reference.store = std::make_unique<ParamStore>(backend, plan.specs, frozen, world_size, config.compute_dtype,
                                                 residency, plan.quant);
  reference.engine = std::make_unique<ZeroEngine>(backend, comm, *reference.store, zero, no_optimizer,
                                                  config.compute_dtype);
  for (int unit = 0; unit < reference.store->num_units(); ++unit) {
    if (!residency.params) reference.store->commit_unit_params(unit);
    if (load) load(*reference.store, unit);
    reference.engine->init_unit_from_store(unit);
  }
  reference.engine->finish_init();
  if (before_model) before_model(*reference.store, *reference.engine);
  ModelOptions options;  // no dropout, no adapters, no checkpointing: one forward at a time
  options.head_chunk_rows = config.head_chunk_rows;
  options.forward_only = true;
  reference.model = make_causal_lm(model_config, *reference.store, backend, options);
  reference.model->set_unit_hooks(reference.engine.get());
  return reference;
}

}  // namespace zt
