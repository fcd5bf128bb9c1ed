// Metrics: the per-step record written to OUT/metrics.jsonl (one JSON object per line,
// rank 0), the console line, and the process memory figures they carry.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

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
  double flops = 0.0;       // FLOPs the step needed (forward + backward, no recomputation)
  double peak_tflops = 0.0; // of one rank's device, 0 when unknown (then mfu is null)
  int world_size = 1;
  std::optional<int64_t> mem_device_peak;  // bytes; empty on the CPU backend
};

struct HostMemory {
  int64_t rss_bytes = 0;       // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM
};
HostMemory read_host_memory();

nlohmann::json metrics_json(const StepMetrics& metrics);
std::string metrics_console_line(const StepMetrics& metrics);

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
