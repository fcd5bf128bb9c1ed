// The batch a checkpoint was trained with, read from its manifest before a resuming run resolves
// its own batch sizes: the run keeps the checkpoint's train_batch_size on another number of ranks
// by choosing its gradient accumulation (train/resume_batch.h), and that choice changes the step's
// schedule and memory, so it is made before anything is predicted or assembled.
#pragma once
#include <cstdint>
#include <string>

namespace zt {

struct CheckpointBatch {
  int64_t train_batch_size = 0;             // the global batch (the run identity's)
  int world_size = 0;                       // the ranks that saved it
  int64_t micro_batch_size = 0;             // 0 where the manifest's config does not say
  int64_t gradient_accumulation_steps = 0;  // likewise
};

// Reads checkpoint_dir/manifest.json (the files are verified later, by load_checkpoint). Errors
// name the file and the missing or bad entry.
CheckpointBatch read_checkpoint_batch(const std::string& checkpoint_dir);

}  // namespace zt
