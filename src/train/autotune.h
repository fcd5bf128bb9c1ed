// The autotuner's search (`zerotune autotune`): like DeepSpeed's autotuner
// (deepspeed/autotuning), which tunes ZeRO stage x micro-batch with its own experiments, but it
// also tunes offload and activation checkpointing, and it prunes with the memory model
// (train/memory_model.h) instead of launching experiments that run out of memory:
//   - a branch is one ZeRO stage x offload x activation-checkpointing choice; its micro-batches
//     go 1, 2, 4, ... up to max_micro_batch;
//   - each experiment's need is predicted first; one over the budget is not run, and neither is
//     any larger micro-batch of its branch (a larger micro-batch needs more);
//   - the survivors run a few profiled steps; in fast mode (DeepSpeed's default) a branch stops
//     growing its micro-batch once the throughput falls or gains less than 5% (its
//     METRIC_PERCENT_DIFF_CONST);
//   - the fastest experiment (samples/s) is the result.
// Experiment names follow DeepSpeed's (z2_gas1_tmbspg4) with the offload and checkpointing keys
// (train/memory_model_choices.h).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/memory_model_choices.h"

namespace zt {

struct AutotuneExperiment {
  ZeroChoice choice;
  int64_t micro_batch = 1;      // train_micro_batch_size_per_gpu
  int64_t accumulation = 1;     // gradient_accumulation_steps (the user's; not tuned)
  std::string name;             // z3_oocpu_opnone_acT_gas1_tmbspg4
  int64_t predicted_bytes = 0;  // the memory model's need per rank
  bool pruned = false;          // predicted over the budget: not run
  bool ran = false;
  std::string error;            // a run that failed: why
  double samples_per_sec = 0.0, tflops_per_rank = 0.0;  // measured, after the first (warm-up) step
  int64_t measured_bytes = 0;   // measured peak per rank (device, or the CPU backend's buffers)
  nlohmann::ordered_json to_json() const;
};

struct AutotuneSearch {
  std::vector<ZeroChoice> branches;  // in the order they are tried
  int64_t max_micro_batch = 64;
  int64_t accumulation = 1;
  std::optional<int64_t> budget_bytes;  // per rank; none: nothing is pruned
  bool fast = true;
};

// DeepSpeed's fast mode: a gain below this fraction ends a branch's micro-batch growth.
inline constexpr double kAutotuneMinGain = 0.05;

// Runs the search: `predict` gives an experiment's need (bytes per rank), `run` runs it (fills
// ran, error, samples_per_sec, tflops_per_rank, measured_bytes). Returns every experiment
// considered, pruned ones included, in order.
std::vector<AutotuneExperiment> autotune(const AutotuneSearch& search,
                                         const std::function<int64_t(const AutotuneExperiment&)>& predict,
                                         const std::function<void(AutotuneExperiment&)>& run);

// The experiment with the most samples/s among those that ran without error; nullptr if none.
const AutotuneExperiment* fastest_experiment(const std::vector<AutotuneExperiment>& experiments);

// When nothing fits the budget: a message naming the budget and the smallest need (and its
// setting), e.g. for `zerotune autotune` to stop with.
std::string nothing_fits_message(const std::vector<AutotuneExperiment>& experiments, int64_t budget_bytes);

// The text table of the results (setting, memory predicted / measured, samples/s, TFLOPS),
// fastest marked; what summary.txt holds.
std::string format_autotune_table(const std::vector<AutotuneExperiment>& experiments);

}  // namespace zt
