// What one `zerotune train` process holds from its first check to its last step, filled phase by
// phase by run_training (trainer.cpp): prepare (checks, model and data), the device and the
// memory gate, the assembly (train/run_assembly.h), the step plan and resume, the run record
// (run_record.cpp), the loop (training_loop.cpp) and the finish.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/checkpoint.h"
#include "comm/communicator.h"
#include "comm/device_communicator.h"
#include "data/step_samples.h"
#include "data/token_shards.h"
#include "model/config.h"
#include "train/memory_model.h"
#include "train/metrics.h"
#include "train/pipe_engine.h"
#include "train/run_assembly.h"
#include "train/sampling.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace zt {

struct TrainingRun {
  TrainingRun(TrainConfig config_, const RunOptions& options_) : config(std::move(config_)), options(options_) {}

  TrainConfig config;  // resolved as the phases go (batch sizes, LoRA targets, quantization, schedule)
  const RunOptions& options;
  // prepare:
  std::unique_ptr<Communicator> host_comm;  // MPI: the traffic counters, the timeout and the error context
  int world_size = 1, rank = 0;
  bool leader = true;  // rank 0: run.json, metrics.jsonl, the console
  ModelConfig model_config;
  std::optional<TokenDataset> dataset;
  std::optional<TokenDataset> eval_data;  // --eval-data
  std::unique_ptr<TrainingSamples> samples;  // --sample-prompts (train/sampling.h)
  // the device:
  RunDevice device;                  // the backend, the device communicator, the control one
  Communicator* comm = nullptr;      // the collectives' (the device's, else host_comm)
  // --pipeline-stages (train/pipe_engine.h): the layout, and this rank's stage's data-parallel
  // group on `comm` and on host_comm (the ZeRO engine's; the same as comm and host_comm without one).
  std::optional<PipelineTopology> topology;
  std::unique_ptr<Communicator> stage_comm, stage_host_comm;
  std::unique_ptr<PipeEngine> pipe;
  int64_t longest_sample = 0;        // the memory prediction's sequence length
  DataLengths data_lengths;          // data_lengths_of(dataset): the prediction's data
  MemoryPrediction memory_prediction;
  // assembled:
  RunParts parts;
  // the step plan and resume:
  std::unique_ptr<StepSamples> step_samples;
  int64_t steps_per_epoch = 0, total_steps = 0;
  RunIdentity identity;
  TrainingState state;                   // where the run starts (a checkpoint's, or step 0)
  std::optional<std::string> resume_from;  // the checkpoint resumed, if any (found in prepare)
  nlohmann::json resume_batch;             // the accumulation chosen to keep its train_batch_size (null: none)
  // the loop:
  int64_t skipped = 0;                     // steps skipped so far (resumed runs: the checkpoint's too)
  std::optional<ConsoleProgress> console;  // rank 0's step lines (a progress bar on a terminal)

  Backend& backend() { return *device.backend; }
  // The ZeRO engine's communicators and ranks: the stage's data-parallel group, or all ranks.
  Communicator& data_comm() { return stage_comm ? *stage_comm : *comm; }
  Communicator* data_host_comm() { return stage_host_comm ? stage_host_comm.get() : host_comm.get(); }
  Communicator& control() { return *device.control; }
  // A pipeline run's part in a checkpoint (ckpt/checkpoint.h); nullopt without a pipeline.
  std::optional<PipelineCheckpoint> pipeline_checkpoint() {
    if (!topology) return std::nullopt;
    PipelineCheckpoint part;
    part.world = host_comm.get();
    part.stage = topology->stage_of(rank);
    part.stages = topology->stages();
    part.replicas = topology->replicas();
    part.replica = topology->replica_of(rank);
    part.chunks = parts.stage.chunks;
    part.layout = {{"stages", part.stages}, {"replicas", part.replicas}, {"schedule", config.pipeline.schedule},
                   {"chunks", config.pipeline.chunks}, {"partition_method", config.pipeline.partition_method},
                   {"stage_first_units", parts.stage.bounds}};
    return part;
  }
  // A line on rank 0's console (between its step lines); other ranks say nothing.
  void say(const std::string& line) {
    if (console) console->message(line);
  }
};

// Rank 0: OUT/run.json (the resolved configuration, the layout, the memory prediction and what
// the device measured after set-up) and the start banner.
void write_run_record(TrainingRun& run);

// The steps from run.state.step to run.total_steps, with evaluation and checkpoints when due.
// False when a stop signal ended it early (the checkpoint is saved).
bool run_training_loop(TrainingRun& run);

}  // namespace zt
