// metrics.jsonl records, console lines and /proc/self/status memory figures.
#include "train/metrics.h"

#include <cstdio>

#include "core/error.h"

namespace zt {

HostMemory read_host_memory() {
  HostMemory memory;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kilobytes = 0;
  std::string unit;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kilobytes >> unit) memory.rss_bytes = kilobytes * 1024;
    if (key == "VmHWM:" && status >> kilobytes >> unit) memory.peak_rss_bytes = kilobytes * 1024;
  }
  return memory;
}

nlohmann::json metrics_json(const StepMetrics& m) {
  const double seconds = m.step_seconds > 0.0 ? m.step_seconds : 1e-12;
  const double tflops_per_rank = m.flops / seconds / 1e12 / m.world_size;
  HostMemory memory = read_host_memory();
  nlohmann::json record = {
      {"step", m.step},
      {"epoch", m.epoch},
      {"loss", m.loss},
      {"lr", m.lr},
      {"grad_norm", m.grad_norm},
      {"loss_scale", m.loss_scale},
      {"skipped", m.skipped},
      {"samples", m.samples},
      {"tokens", m.tokens},
      {"target_tokens", m.target_tokens},
      {"padding_fraction", m.padding_fraction},
      {"step_time", m.step_seconds},
      {"samples_per_sec", static_cast<double>(m.samples) / seconds},
      {"tokens_per_sec", static_cast<double>(m.tokens) / seconds},
      {"tflops_per_rank", tflops_per_rank},
      {"mfu", nullptr},
      {"mem_device_peak", nullptr},
      {"mem_host_rss", memory.rss_bytes},
      {"mem_host_peak", memory.peak_rss_bytes},
  };
  if (m.peak_tflops > 0.0) record["mfu"] = tflops_per_rank / m.peak_tflops;
  if (m.mem_device_peak) record["mem_device_peak"] = *m.mem_device_peak;
  return record;
}

std::string metrics_console_line(const StepMetrics& m) {
  const double seconds = m.step_seconds > 0.0 ? m.step_seconds : 1e-12;
  char line[512];
  std::snprintf(line, sizeof(line),
                "step %lld/%lld | epoch %.2f | loss %.4f | lr %.3e | grad_norm %.3f | skipped %lld | "
                "%.2f samples/s | %.0f tokens/s | %.3f TFLOPS | host RSS %.0f MiB",
                static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.epoch, m.loss, m.lr,
                m.grad_norm, static_cast<long long>(m.skipped), static_cast<double>(m.samples) / seconds,
                static_cast<double>(m.tokens) / seconds, m.flops / seconds / 1e12 / m.world_size,
                static_cast<double>(read_host_memory().rss_bytes) / (1024.0 * 1024.0));
  return line;
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  ZT_CHECK(out_, path, ": cannot open for writing");
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  ZT_CHECK(out_, path_, ": write failed (disk full?)");
}

}  // namespace zt
