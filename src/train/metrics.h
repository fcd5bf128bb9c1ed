// Metrics: the per-step record written to OUT/metrics.jsonl (one JSON object per line,
// rank 0), the console line (plain in a batch log, with a progress bar on a terminal), the
// process memory figures they carry, and the mean step time behind the ETA.
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

struct HostMemory {
  int64_t rss_bytes = 0;       // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM
};
HostMemory read_host_memory();

struct StepMetrics {
  int64_t step = 0;         // optimizer updates done, 1-based
  int64_t total_steps = 0;
  double epoch = 0.0;       // fractional epoch at the end of the step
  double loss = 0.0;        // mean token loss of the step's global batch
  double lr = 0.0;          // learning rate the update used
  double grad_norm = 0.0;   // global L2 norm before clipping
  double loss_scale = 1.0;
  int64_t skipped = 0;      // steps skipped so far (fp16 overflow, batches without targets)
  int64_t samples = 0;      // samples in this step's global batch
  int64_t tokens = 0;       // real (non-padding) tokens in this step's global batch
  int64_t target_tokens = 0;
  double padding_fraction = 0.0;
  double step_seconds = 0.0;
  double mean_step_seconds = 0.0;  // StepTimeAverage::mean() for the ETA; 0: use step_seconds
  double flops = 0.0;       // FLOPs the step needed (forward + backward, no recomputation)
  double peak_tflops = 0.0; // of one rank's device, 0 when unknown (then mfu is null)
  int world_size = 1;
  std::optional<int64_t> mem_device_peak;     // bytes; empty on the CPU backend
  std::optional<int64_t> mem_device;          // bytes in use now; empty on the CPU backend
  std::optional<HostMemory> host_memory;      // empty: read /proc/self/status when formatting
  // The objective's own figures (Objective::step_figures: DPO's rewards/chosen, ...), after the
  // others in the record and the console line.
  std::vector<std::pair<std::string, double>> objective_figures;
};

// The figures computed from a StepMetrics, shared by the JSON record and the console line.
struct DerivedMetrics {
  double samples_per_sec = 0.0;
  double tokens_per_sec = 0.0;
  double tflops_per_rank = 0.0;
  std::optional<double> mfu;  // tflops_per_rank / peak_tflops; empty when the peak is unknown
  double eta_seconds = 0.0;   // mean step time x steps left
  HostMemory host;
};
DerivedMetrics derive_metrics(const StepMetrics& metrics);

// Mean step time for the ETA. The first step of a run (allocations, page faults, cold caches)
// is left out once a later one exists, so the ETA does not start too pessimistic.
class StepTimeAverage {
 public:
  void add(double seconds);
  double mean() const;  // 0 before the first add

 private:
  int64_t count_ = 0;
  double first_seconds_ = 0.0;
  double later_sum_ = 0.0;  // sum over steps 2.. of this run
};

// One metrics.jsonl record. Keys: step, total_steps, epoch, loss, lr, grad_norm, loss_scale,
// skipped, samples, tokens, target_tokens, padding_fraction, step_time, mean_step_time,
// eta_seconds, samples_per_sec, tokens_per_sec, tflops_per_rank, mfu (null when unknown),
// mem_device, mem_device_peak (null on CPU), mem_host_rss, mem_host_peak (bytes); then the
// objective's figures, if any.
nlohmann::json metrics_json(const StepMetrics& metrics);

// The plain console line, one per steps_per_print steps, e.g.
// "step 12/100 | epoch 0.24 | loss 2.3456 | lr 3.000e-04 | grad_norm 0.812 | loss_scale 1 |
//  skipped 0 | 12.3 samples/s | 4567 tokens/s | 1.234 TFLOPS/rank | MFU 45.1% |
//  device 1.20 GiB (peak 3.40 GiB) | host 512 MiB (peak 600 MiB) | ETA 3m12s"
// (one line; "MFU -" and "device -" when unknown), then " | NAME VALUE" per objective figure.
std::string metrics_console_line(const StepMetrics& metrics);

// The progress bar a terminal shows under the lines, redrawn every step, e.g.
// "[=========>          ]  45% 45/100 | loss 2.3456 | 4567 tokens/s | ETA 3m12s".
std::string progress_bar_line(const StepMetrics& metrics, int bar_width);

// Human-readable figures used by the lines above (and the report): "512 MiB", "1.20 GiB";
// "45s", "3m12s", "1h02m", "2d03h".
std::string format_bytes(int64_t bytes);
std::string format_duration(double seconds);

// Rank 0's banner line on memory, from the memory model's prediction (train/memory_model.h):
// "memory: rank 0 predicted ... after set-up, ... at the step's peak (micro-batch B x T tokens)",
// then what the device reports after set-up (`device_used_after_setup`, GPU backends) and the
// host's ZeRO-Offload buffers. On the CPU backend every buffer is host memory and the device
// figures are 0: the host figures are printed instead, said as such.
struct MemoryPrediction;
std::string memory_banner_line(const MemoryPrediction& prediction, std::optional<int64_t> device_used_after_setup,
                               int64_t micro_batch, int64_t tokens);

// Rank 0's console during training. In a batch log (not a terminal) it prints the plain line
// when asked and nothing else; on a terminal it also keeps a progress bar on the last line,
// erased before any other line is printed and at the end (also when unwinding from an error,
// so an error message does not land on the bar's line).
class ConsoleProgress {
 public:
  ConsoleProgress(std::FILE* stream, bool terminal);
  ~ConsoleProgress();
  ConsoleProgress(const ConsoleProgress&) = delete;
  ConsoleProgress& operator=(const ConsoleProgress&) = delete;

  // Whether to draw the bar on `stream`: the environment variable ZT_PROGRESS says "bar" or
  // "lines" (the job scripts set "lines" when their output goes to a log); unset, when `stream`
  // is a terminal with a size that understands "\r" and "\x1b[K" (TERM is not "dumb"). Under
  // mpirun every rank's stdout is a pseudo-terminal without a size, also when mpirun's output
  // goes to a file: plain lines there unless ZT_PROGRESS=bar. Another value is an error.
  static bool wants_bar(std::FILE* stream);

  // After every optimizer step; print_line: this step is a steps_per_print step.
  void step(const StepMetrics& metrics, bool print_line);
  // Any other line (evaluation, warnings, the summary): printed above the bar.
  void message(const std::string& line);
  // Erases the bar; call at the end of training.
  void finish();

 private:
  void erase_bar();

  std::FILE* stream_;
  bool terminal_;
  std::string bar_;  // the bar on screen now ("" when none)
};

// Appends one JSON line per record and flushes, so a killed job keeps what it logged.
class MetricsWriter {
 public:
  // append=false starts a fresh file (a new run); true continues one (resume).
  MetricsWriter(const std::string& path, bool append);
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace zt
