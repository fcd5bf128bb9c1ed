// The training loop of `zerotune train`: loads the model and data, builds the parameter store
// (with LoRA adapters when asked), and runs optimizer steps over global batches, writing
// OUT/run.json and OUT/metrics.jsonl.
#pragma once
#include <string>
#include <vector>

#include "train/sampling.h"
#include "train/train_config.h"

namespace zt {

// Extra run options that only the command line gives.
struct RunOptions {
  std::string adapter_dir;     // --adapter: continue a PEFT adapter
  double peak_tflops = 0.0;    // --peak-tflops: per-rank peak for MFU (0: unknown)
  int64_t log_every = 0;       // console line every N steps (0: steps_per_print)
  int64_t profile_step = 0;    // --profile-step: the step whose modules are timed (0: none)
  int64_t profiler_first = 0;  // --cuda-profiler-steps FIRST:LAST: Backend::profiler_range around
  int64_t profiler_last = 0;   //   steps FIRST..LAST (1-based; 0: none)
  bool grad_accum_given = false;  // --grad-accum: a resume on other ranks may not choose the accumulation
  bool overwrite = false;      // --overwrite: start over in an --out that holds another run
  bool allow_data_change = false;  // --allow-data-change: resume a checkpoint made on other data
  bool report_nonfinite = false;   // --report-nonfinite: where inf/NaN first appeared in a skipped step
  SampleOptions samples;           // --sample-prompts, --sample-every, --sample-max-new-tokens (train/sampling.h)
  std::vector<std::string> notes;  // messages from config translation, printed at start
};

void run_training(TrainConfig config, const RunOptions& options);

}  // namespace zt
