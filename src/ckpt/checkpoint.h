// Per-rank checkpoints (DESIGN.md "Checkpoints"): save, find, verify, load (also onto another
// world size or ZeRO stage).
//
//   OUT/checkpoints/<tag>/manifest.json   what was saved (step, world size, stage, layout,
//                                         training state, base model, per-file size + sha256)
//   OUT/checkpoints/<tag>/rank-RRRRR.h5   partition r: fp32 master and the optimizer's named
//                                         state buffers per trainable group ("decay/master",
//                                         "decay/exp_avg", ...; the manifest's "optimizer")
//   OUT/checkpoints/latest                the tag of the newest complete checkpoint
//
// Saving: every rank writes its file into <tag>.tmp/ (flushed, checksummed), the checksums
// are gathered to rank 0, which writes the manifest; after a barrier rank 0 renames the
// directory to <tag> and replaces `latest` by rename. A crash at any moment leaves the
// previous checkpoint complete and `latest` pointing at it. Frozen base weights are not saved:
// the manifest records the base model's path and a checksum of its structure.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/pipeline_checkpoint.h"
#include "comm/communicator.h"
#include "core/quant4bit.h"
#include "model/lora_config.h"
#include "model/param_store.h"
#include "zero/zero_engine.h"

namespace zt {

// The training loop's position and state besides the optimizer partitions.
struct TrainingState {
  int64_t step = 0;            // optimizer steps done (skipped ones included)
  int64_t skipped = 0;         // of which skipped (they did not advance the schedule or Adam)
  int64_t samples_consumed = 0;  // global samples of the finished steps (step x train_batch_size)
  double loss_scale = 1.0;     // the fp16 loss scaler's state (1 without fp16)
  nlohmann::json loss_scaler;  // the scaler's full state (empty without fp16)
  std::vector<std::string> notes;  // what a load could not restore as saved (rank 0 prints them)
};

// What must agree between a checkpoint and the run that resumes it.
struct RunIdentity {
  std::string model_dir;
  std::string model_checksum;  // model_structure_checksum(model_dir)
  std::string model_weights_digest;  // model_weights_digest(model_dir): a LoRA run's frozen base must match
  std::string data_digest;     // data_digest(shards): the training data must match unless allow_data_change
  bool allow_data_change = false;    // (not recorded) --allow-data-change: a different data digest is accepted
  int64_t train_batch_size = 0;
  int64_t dataset_samples = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  LoraConfig lora;
  QuantConfig quantize;  // QLoRA: the 4-bit storage of the frozen base (adapters learned on its bits)
  // A frozen reference model built from model_dir (DPO under full fine-tuning): the manifest
  // records it ("reference_model": model_dir and its weights digest), and a resume rebuilds it
  // from model_dir, which must still hold the same weights.
  bool reference_from_model_dir = false;
};

// sha256 over config.json and each weight file's name, size and safetensors header: equal for
// the same model files, cheap for a 13 GB model (the tensor data is not read).
std::string model_structure_checksum(const std::string& model_dir);
// Sampled sha256 (core/sha256.h) of every weight file's data: tells two models of the same shape
// apart (another base under a LoRA checkpoint) without reading 13 GB.
std::string model_weights_digest(const std::string& model_dir);
// Sampled sha256 of the training data's shard files, in order (another dataset of the same size).
std::string data_digest(const std::vector<std::string>& shard_paths);

// Saves a checkpoint of the current state as OUT/checkpoints/global_step<step>. Collective: every
// rank calls it. `run_config` is the resolved configuration (run.json's "config": the manifest
// keeps a copy, and its scheduler type). keep_last > 0 deletes the oldest complete checkpoints
// beyond that many. Returns the checkpoint's directory. Weights that are not finite (NaN or inf on
// any rank) are refused before anything is written: such a state never becomes `latest`.
std::string save_checkpoint(const std::string& out_dir, const TrainingState& state, const RunIdentity& identity,
                            const nlohmann::json& run_config, ZeroEngine& engine, const ParamStore& store,
                            Communicator& comm, int64_t keep_last, const PipelineCheckpoint* pipeline = nullptr);

// --resume auto: the checkpoint `latest` names under OUT/checkpoints (the newest complete one
// when `latest` is missing or names none), or nothing when there is none yet (a fresh start).
// Its files are verified (checkpoint_damage, shared out over the ranks): a damaged one falls back
// to the newest older checkpoint that is intact, said on rank 0's stdout; none intact is an
// error. --resume DIR: that checkpoint, or the one a run directory, its checkpoints/ or a
// `latest` file leads to (ckpt/checkpoint_location.h), as given (load_checkpoint verifies it).
// Errors name what is missing. Collective for "auto": every rank calls it. Without `comm`, the
// ranks of MPI_COMM_WORLD verify.
std::optional<std::string> resolve_resume_checkpoint(const std::string& resume, const std::string& out_dir,
                                                     Communicator& comm);
std::optional<std::string> resolve_resume_checkpoint(const std::string& resume, const std::string& out_dir);

// The first damage of a complete checkpoint, or "" when it is intact: a manifest.json that is not
// JSON, a rank or exchange file missing or of another size or sha256 than the manifest lists (each
// file hashed by one rank). A manifest that parses but holds wrong values is not damage but an
// edit: load_checkpoint refuses it naming the key. Collective.
std::string checkpoint_damage(const std::string& checkpoint_dir, Communicator& comm);

// Verifies the checkpoint (manifest, every file's size and sha256), checks it fits this run
// (same model, parameters, batch size, data, seed), loads this rank's partitions re-sliced for
// the engine's world size and stage, refreshes the compute parameters and returns the state.
// `model_units`: the model's unit of each store unit (a pipeline rank's store holds some of the
// model's units, renumbered from 0: pipeline_checkpoint.h), -1 for a unit of tied copies, each
// copy loaded (master and optimizer state) from its original's place; empty: the store is the
// whole model.
TrainingState load_checkpoint(const std::string& checkpoint_dir, const RunIdentity& identity, ZeroEngine& engine,
                              const ParamStore& store, Communicator& comm, const std::vector<int>& model_units = {});

// Reads a checkpoint's manifest (verifying its files' sizes and checksums when `verify_files`).
nlohmann::json read_checkpoint_manifest(const std::string& checkpoint_dir, bool verify_files);

// The LoRA settings a checkpoint was trained with (its manifest's run.lora; disabled for full
// fine-tuning): what export and generate rebuild the adapters from.
LoraConfig checkpoint_lora(const nlohmann::json& manifest);

// Fills the trainable groups of `store` (laid out for ONE partition) with the full fp32 master
// weights of a checkpoint: for export and for --dump-final-style reads.
void load_full_master(const std::string& checkpoint_dir, const nlohmann::json& manifest, ParamStore& store);

}  // namespace zt
