// The flops profiler of `--profile-step N` (like DeepSpeed's): per module of the model and
// per phase of the step (embedding, attention, mlp, norm, head, optimizer, communication) the
// FLOPs and the time measured in that one step, shown as a table (FLOPs, time, TFLOPS, share
// of the step) and written as JSON. The trainer measures and calls add(); this file only
// accumulates and formats.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

struct ProfileRow {
  std::string module;    // "attention", "mlp", ... (one row per name, summed over layers)
  double flops = 0.0;    // FLOPs of one rank in the profiled step (0 for communication)
  double seconds = 0.0;  // wall time of one rank in the profiled step
};

struct ProfileTable {
  int64_t step = 0;           // the profiled optimizer step (1-based)
  double step_seconds = 0.0;  // the whole step's wall time; the rows' sum may be less
  int rank = 0;               // whose timings these are
  std::vector<ProfileRow> rows;  // in the order modules were first added

  // Adds flops and seconds to the row named `module` (created at the end when new): the
  // trainer calls it once per layer and phase, the table shows the sums.
  void add(const std::string& module, double flops, double seconds);
  double total_flops() const;
  double total_seconds() const;  // sum of the rows
};

// The table printed by rank 0, e.g.
//   profile of step 5 (rank 0): 0.123 s
//   module           FLOPs      time (ms)   TFLOPS   share
//   attention        1.20 G        12.300    0.098   10.0%
//   ...
//   other (unmeasured)   -         1.000        -     0.8%
//   total (step)     3.40 G       123.000    0.028  100.0%
// "other" is the part of the step no row measured (only shown when positive); "share" is a
// row's time over the step's; the total is the step's wall time (overlapped rows, such as
// communication behind backward, can sum to more).
std::string format_profile_table(const ProfileTable& table);

// {"step", "rank", "step_seconds", "total_flops", "tflops", "modules": [{"module", "flops",
//  "seconds", "tflops", "share"}, ...], "other_seconds"}; tflops is null for a row that took
// no time (nothing to divide by).
nlohmann::json profile_json(const ProfileTable& table);

// A FLOP count with an SI prefix: "950", "1.20 K", "3.40 G", "12.00 T".
std::string format_flops(double flops);

}  // namespace zt
