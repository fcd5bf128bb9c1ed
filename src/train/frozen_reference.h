// A frozen copy of the model's initial weights: DPO's reference model under full fine-tuning
// (TRL's ref_model, a copy of the policy at the start; train/dpo_objective.cpp). Under LoRA no copy
// is built: the reference is the base with the adapters disabled.
//
// The copy has the policy's parameters (the same specs and units), every one frozen: no gradient,
// no optimizer state, no fp32 master. Its own ZeroEngine holds it under the run's ZeRO stage, as
// DeepSpeed holds a frozen model beside the trained one:
//   stage 0-2  every rank keeps a full replica in the compute dtype;
//   stage 3    each rank keeps its partition (in host memory with offload_param), and the
//              reference's forward gathers unit by unit and releases, like the policy's.
// Its model is forward-only (ModelOptions::forward_only): no gradient buffer, the residual stream
// in two buffers, so a reference pass keeps nothing beyond itself but its per-row log-probs.
//
// Weights: the model directory's, always (also on --resume, where the policy's come from the
// checkpoint afterwards), so a resumed run's reference is still the initial weights; the
// checkpoint identity checks that the model directory still holds the same weights.
#pragma once
#include <functional>
#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/param_store.h"
#include "model/parameter_plan.h"
#include "train/train_config.h"
#include "zero/zero_engine.h"

namespace zt {

// Members destroyed in reverse order: the model before the engine before the store.
struct FrozenReference {
  std::unique_ptr<ParamStore> store;  // the plan's specs, all frozen, compute dtype
  std::unique_ptr<ZeroEngine> engine;  // the run's stage; no optimizer work (nothing trainable)
  std::unique_ptr<CausalLM> model;     // forward-only, its unit hooks the engine
};

// Builds the reference over `plan` (the policy's parameters) with the weights `load` writes into
// each unit of the reference's store (the model directory's base weights), unit by unit as the
// policy's assembly loads (a ZeRO-3 rank never holds more than one unit beyond its partition).
// `before_model` (may be empty) runs once the store and engine are set up (the memory model names
// their buffers).
FrozenReference build_frozen_reference(const TrainConfig& config, const ModelConfig& model_config,
                                       const ParameterPlan& plan, Backend& backend, Communicator& comm,
                                       int world_size, const std::function<void(ParamStore&, int)>& load,
                                       const std::function<void(ParamStore&, ZeroEngine&)>& before_model);

}  // namespace zt
