// One assembly of a run: the parameter plan, the parameter store, the ZeRO engine (with its
// reduction strategy and optimizer), the model wired to the engine's hooks, fp16's loss scaler
// and the step's schedule, built from a training configuration and a backend in one order.
// The trainer (with weights, on the run's backend) and the memory model (without weights, on the
// counting backend: train/memory_model.h) both build their run here and both step it with the
// same StepRunner, so what the prediction counts is what the run allocates; a test compares the
// two allocation by allocation (tests/mpi/test_allocation_drift.py, ZT_ALLOCATION_LOG).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/param_store.h"
#include "model/parameter_plan.h"
#include "optim/loss_scaler.h"
#include "train/frozen_reference.h"
#include "train/objective.h"
#include "train/step_runner.h"
#include "train/step_schedule.h"
#include "train/train_config.h"
#include "zero/zero_engine.h"

namespace zt {

// The parts of a run; members are destroyed in reverse order (the model before the engine
// before the store), as each holds references to the ones above it.
struct RunParts {
  ParameterPlan plan;
  StoreResidency residency;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<Objective> objective;      // config.objective; may add parameters to the plan
  std::unique_ptr<CausalLM> model;           // its unit hooks: the engine; its head may be the objective's
  std::unique_ptr<FrozenReference> reference;  // the objective's frozen copy of the initial weights, or null
  std::optional<DynamicLossScaler> scaler;   // fp16 only: DeepSpeed's dynamic loss scaler
  std::vector<StepInstruction> schedule;     // one optimizer step's instructions
};

// Called between the parts, for a caller that names what each part allocates (the memory
// model's terms). Every default does nothing.
class AssemblyObserver {
 public:
  virtual ~AssemblyObserver() = default;
  virtual void before_store() {}
  virtual void before_engine() {}
  virtual void before_model(ParamStore& store, ZeroEngine& engine) { (void)store, (void)engine; }  // both set up
  // Around a frozen reference (train/frozen_reference.h): before it, and once its store is set up.
  virtual void before_reference() {}
  virtual void before_reference_model(ParamStore& store, ZeroEngine& engine) { (void)store, (void)engine; }
};

// Fills a unit's parameters in the store (base weights, LoRA initialisation, a PEFT adapter)
// after the store committed them and before the engine copies them into its partitions.
using UnitWeights = std::function<void(ParamStore& store, int unit)>;

// An objective that needs_frozen_reference gets one built after the model, loaded with `weights`
// again (the initial weights, also on --resume).
// `comm`: the collectives' communicator (the device's); `host_comm`: MPI on host buffers, for an
// optimizer that exchanges on MPI (ZeroEngine). `weights` empty: the parameters stay unwritten
// (the memory model). The unit-by-unit loading keeps a ZeRO-3 rank from ever holding more than
// one unit beyond its partition (zero_store_residency).
RunParts assemble_run(const TrainConfig& config, const ModelConfig& model_config, Backend& backend, Communicator& comm,
                      Communicator* host_comm, int world_size, const UnitWeights& weights,
                      AssemblyObserver* observer = nullptr);

// What the model's options are for a run (checkpointing, activation offload, head chunks, LoRA).
ModelOptions model_options_of(const TrainConfig& config);
// What a step needs of the run's configuration (its scheduler resolved already).
StepConfig step_config_of(const TrainConfig& config);
// The step's instructions: gradient accumulation, or an optimizer fused into backward (LOMO),
// with a norm pass first when it must clip by the global norm or watch for fp16 overflow.
std::vector<StepInstruction> run_schedule(const TrainConfig& config, const Optimizer& optimizer);

}  // namespace zt
