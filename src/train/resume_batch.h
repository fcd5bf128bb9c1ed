// Resuming on another number of ranks (issue 35 item 5). A checkpoint fixes the global batch
// (train_batch_size: the samples of a step, hence the data order and the learning-rate schedule);
// a run on fewer or more ranks whose batch arithmetic gives another global batch keeps the
// checkpoint's by choosing gradient_accumulation_steps, as DeepSpeed users expect, when the
// numbers divide and the user did not fix the accumulation; otherwise it stops naming the flags
// that would work. Decided before resolve_batch_sizes, the memory prediction and the assembly:
// the accumulation changes the step's schedule.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_batch.h"
#include "train/train_config.h"

namespace zt {

struct ResumeBatchDecision {
  int64_t gradient_accumulation_steps = 0;  // what the run now takes
  std::string text;                         // "4 ranks instead of 8: gradient_accumulation_steps 2 -> 4 keeps ..."
  nlohmann::json record;                    // run.json's "resume_batch"
};

// `config` holds the batch numbers as given (0: derive; before resolve_batch_sizes).
// `accumulation_fixed`: the user gave gradient_accumulation_steps (--grad-accum, or a number in
// the DeepSpeed JSON), so zerotune may not choose it. Nothing to decide when the run's batch
// arithmetic already gives the checkpoint's train_batch_size; a decision sets
// config.gradient_accumulation_steps. Refuses (zt::Error naming `checkpoint_dir`, the arithmetic
// and the flags that would work) when no accumulation keeps the checkpoint's global batch or the
// given numbers contradict it.
std::optional<ResumeBatchDecision> keep_checkpoint_batch(TrainConfig& config, int world_size, bool accumulation_fixed,
                                                         const CheckpointBatch& saved,
                                                         const std::string& checkpoint_dir);

// The flags that give `train_batch_size` on `world_size` ranks ("use --micro-batch-size 2
// --grad-accum 4, ... or ..."; the micro-batch `preferred_micro` first when it fits), or how many
// ranks would, when world_size does not divide it.
std::string flags_for_batch(int64_t train_batch_size, int world_size, int64_t preferred_micro);

}  // namespace zt
