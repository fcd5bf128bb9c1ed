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
#include <array>
#include <map>
#include <optional>
#include <string>
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

// A pipeline rank's share of the model (issue 32): the model's unit ranges it holds, one per model
// chunk (virtual stages chunk x P + stage; one chunk unless the schedule is interleaved), laid out in
// its store one after the other from unit 0; and each LoRA adapter's index over the whole model
// (PEFT's fresh adapters draw their initialisation by that index).
struct StageUnits {
  std::vector<std::array<int, 2>> chunks;  // [first, end) of the model's units per chunk; empty: the whole model
  int first_unit = 0;                      // chunks[0][0] (0 without a pipeline)
  std::map<std::string, uint32_t> adapter_index;  // lora_A name -> index; empty: the store's own order
  std::vector<int> bounds;  // every virtual stage's first unit, then the unit count (partition_units); empty: no pipeline
  // The store's unit number of the model's unit `unit` (in one of the chunks).
  int store_unit(int unit) const;
  // The store's first unit of chunk `chunk` (chunks.size(): the unit after the chunks').
  int store_first(int chunk) const;
  // The model's unit of every store unit (a checkpoint's load, ckpt/checkpoint.h): the chunks' units
  // in order, then -1 for the unit of tied copies when there is one; empty without a pipeline.
  std::vector<int> model_units() const;
  // Tied parameters across stages (a tied head on the last stage reading the first stage's token
  // embedding, DeepSpeed's TiedLayerSpec): the stored parameters this stage holds a copy of (in a
  // store unit of their own after the chunks' units, which the tie's unit reads), and those of its
  // own that another stage holds a copy of.
  std::vector<std::string> tied_copies, tied_originals;
};

// The parts of a run; members are destroyed in reverse order (the model before the engine
// before the store), as each holds references to the ones above it.
struct RunParts {
  ParameterPlan plan;                        // the stage's parameters (units numbered from its first)
  StageUnits stage;
  StoreResidency residency;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<Objective> objective;      // config.objective; may add parameters to the plan
  std::unique_ptr<CausalLM> model;           // its unit hooks: the engine; its head may be the objective's
  std::vector<std::unique_ptr<CausalLM>> more_chunks;  // an interleaved pipeline's chunks 1..V-1 (model: chunk 0)
  std::vector<CausalLM*> more_chunk_models() const {
    std::vector<CausalLM*> models;
    for (const std::unique_ptr<CausalLM>& chunk : more_chunks) models.push_back(chunk.get());
    return models;
  }
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
using UnitWeights = std::function<void(ParamStore& store, int unit, const StageUnits& stage)>;

// An objective that needs_frozen_reference gets one built after the model, loaded with `weights`
// again (the initial weights, also on --resume).
// `comm`: the collectives' communicator (the device's; a pipeline stage's data-parallel group);
// `host_comm`: MPI on host buffers, for an optimizer that exchanges on MPI (ZeroEngine);
// `world_size`: the ranks of `comm`; `pipeline_stage`: which stage of config.pipeline this rank
// builds (its units of the partition, pipe/stage_partition.h). `weights` empty: the parameters stay unwritten
// (the memory model). The unit-by-unit loading keeps a ZeRO-3 rank from ever holding more than
// one unit beyond its partition (zero_store_residency).
RunParts assemble_run(const TrainConfig& config, const ModelConfig& model_config, Backend& backend, Communicator& comm,
                      Communicator* host_comm, int world_size, const UnitWeights& weights,
                      AssemblyObserver* observer = nullptr, int pipeline_stage = 0);

// What the model's options are for a run (checkpointing, activation offload, head chunks, LoRA).
ModelOptions model_options_of(const TrainConfig& config, const StageUnits& stage = {}, int chunk = 0);
// What a step needs of the run's configuration (its scheduler resolved already).
StepConfig step_config_of(const TrainConfig& config);
// The step's instructions: gradient accumulation, or an optimizer fused into backward (LOMO),
// with a norm pass first when it must clip by the global norm or watch for fp16 overflow.
std::vector<StepInstruction> run_schedule(const TrainConfig& config, const Optimizer& optimizer);

}  // namespace zt
