// metrics.jsonl records, console lines and the progress bar, /proc/self/status memory
// figures, and the mean step time behind the ETA.
#include "train/metrics.h"

#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "train/memory_model.h"

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

DerivedMetrics derive_metrics(const StepMetrics& m) {
  // A step timed at 0 s (a clock too coarse) must not divide by zero.
  const double seconds = m.step_seconds > 0.0 ? m.step_seconds : 1e-12;
  DerivedMetrics derived;
  derived.samples_per_sec = static_cast<double>(m.samples) / seconds;
  derived.tokens_per_sec = static_cast<double>(m.tokens) / seconds;
  derived.tflops_per_rank = m.flops / seconds / 1e12 / std::max(1, m.world_size);
  if (m.peak_tflops > 0.0) derived.mfu = derived.tflops_per_rank / m.peak_tflops;
  const double mean_seconds = m.mean_step_seconds > 0.0 ? m.mean_step_seconds : m.step_seconds;
  derived.eta_seconds = mean_seconds * static_cast<double>(std::max<int64_t>(0, m.total_steps - m.step));
  derived.host = m.host_memory ? *m.host_memory : read_host_memory();
  return derived;
}

void StepTimeAverage::add(double seconds) {
  if (count_ == 0) first_seconds_ = seconds;
  else later_sum_ += seconds;
  ++count_;
}

double StepTimeAverage::mean() const {
  if (count_ == 0) return 0.0;
  if (count_ == 1) return first_seconds_;
  return later_sum_ / static_cast<double>(count_ - 1);
}

nlohmann::json metrics_json(const StepMetrics& m) {
  const DerivedMetrics d = derive_metrics(m);
  nlohmann::json record = {
      {"step", m.step},
      {"total_steps", m.total_steps},
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
      {"mean_step_time", m.mean_step_seconds > 0.0 ? m.mean_step_seconds : m.step_seconds},
      {"eta_seconds", d.eta_seconds},
      {"samples_per_sec", d.samples_per_sec},
      {"tokens_per_sec", d.tokens_per_sec},
      {"tflops_per_rank", d.tflops_per_rank},
      {"mfu", nullptr},
      {"mem_device", nullptr},
      {"mem_device_peak", nullptr},
      {"mem_host_rss", d.host.rss_bytes},
      {"mem_host_peak", d.host.peak_rss_bytes},
  };
  if (d.mfu) record["mfu"] = *d.mfu;
  if (m.mem_device) record["mem_device"] = *m.mem_device;
  if (m.mem_device_peak) record["mem_device_peak"] = *m.mem_device_peak;
  for (const auto& [name, value] : m.objective_figures) record[name] = value;
  return record;
}

std::string format_bytes(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  char text[64];
  if (mib < 1024.0) std::snprintf(text, sizeof(text), "%.0f MiB", mib);
  else std::snprintf(text, sizeof(text), "%.2f GiB", mib / 1024.0);
  return text;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "-";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t days = total / 86400, hours = total % 86400 / 3600, minutes = total % 3600 / 60, secs = total % 60;
  char text[64];
  if (days > 0) std::snprintf(text, sizeof(text), "%lldd%02lldh", static_cast<long long>(days), static_cast<long long>(hours));
  else if (hours > 0) std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(hours), static_cast<long long>(minutes));
  else if (minutes > 0) std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(minutes), static_cast<long long>(secs));
  else std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(secs));
  return text;
}

std::string metrics_console_line(const StepMetrics& m) {
  const DerivedMetrics d = derive_metrics(m);
  char mfu[32] = "MFU -";
  if (d.mfu) std::snprintf(mfu, sizeof(mfu), "MFU %.1f%%", 100.0 * *d.mfu);
  std::string device = "device -";
  if (m.mem_device || m.mem_device_peak)
    device = cat("device ", m.mem_device ? format_bytes(*m.mem_device) : "-", " (peak ",
                 m.mem_device_peak ? format_bytes(*m.mem_device_peak) : "-", ")");
  char line[768];
  std::snprintf(line, sizeof(line),
                "step %lld/%lld | epoch %.2f | loss %.4f | lr %.3e | grad_norm %.3f | loss_scale %g | skipped %lld | "
                "%.2f samples/s | %.0f tokens/s | %.3f TFLOPS/rank | %s | %s | host %s (peak %s) | ETA %s",
                static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.epoch, m.loss, m.lr,
                m.grad_norm, m.loss_scale, static_cast<long long>(m.skipped), d.samples_per_sec, d.tokens_per_sec,
                d.tflops_per_rank, mfu, device.c_str(), format_bytes(d.host.rss_bytes).c_str(),
                format_bytes(d.host.peak_rss_bytes).c_str(), format_duration(d.eta_seconds).c_str());
  std::string text = line;
  for (const auto& [name, value] : m.objective_figures) {
    char figure[96];
    std::snprintf(figure, sizeof(figure), " | %s %.4f", name.c_str(), value);
    text += figure;
  }
  return text;
}

std::string progress_bar_line(const StepMetrics& m, int bar_width) {
  const DerivedMetrics d = derive_metrics(m);
  const double fraction =
      m.total_steps > 0 ? std::clamp(static_cast<double>(m.step) / static_cast<double>(m.total_steps), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(fraction * bar_width);
  std::string bar = "[";
  for (int cell = 0; cell < bar_width; ++cell)
    bar += cell < filled ? '=' : (cell == filled ? '>' : ' ');
  bar += "]";
  char line[256];
  std::snprintf(line, sizeof(line), "%s %3.0f%% %lld/%lld | loss %.4f | %.0f tokens/s | ETA %s", bar.c_str(),
                100.0 * fraction, static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.loss,
                d.tokens_per_sec, format_duration(d.eta_seconds).c_str());
  return line;
}

std::string memory_banner_line(const MemoryPrediction& prediction, std::optional<int64_t> device_used_after_setup,
                               int64_t micro_batch, int64_t tokens) {
  const std::string shape = cat("micro-batch ", micro_batch, " x ", tokens, " tokens");
  if (prediction.device_peak == 0 && prediction.device_setup == 0)  // the CPU backend: all of it host memory
    return cat("memory: rank 0 predicted ", format_bytes(prediction.host_setup), " of host memory after set-up, ",
               format_bytes(prediction.host_peak), " at the step's peak (", shape, "; the CPU backend holds every buffer "
               "in host memory)");
  std::string line = cat("memory: rank 0 predicted ", format_bytes(prediction.device_setup), " after set-up, ",
                         format_bytes(prediction.device_peak), " at the step's peak (", shape, ")");
  if (device_used_after_setup)
    line += cat("; the device reports ", format_bytes(*device_used_after_setup), " in use after set-up");
  if (prediction.host_peak) line += cat("; host ", format_bytes(prediction.host_peak));
  return line;
}

// "\r" returns to the line's start, "\x1b[K" erases to its end (VT100, every terminal since).
constexpr const char* kEraseLine = "\r\x1b[K";
constexpr int kBarWidth = 30;

ConsoleProgress::ConsoleProgress(std::FILE* stream, bool terminal) : stream_(stream), terminal_(terminal) {}

ConsoleProgress::~ConsoleProgress() { finish(); }

bool ConsoleProgress::wants_bar(std::FILE* stream) {
  const char* choice = getenv("ZT_PROGRESS");
  if (choice != nullptr && *choice != '\0') {
    ZT_CHECK(std::strcmp(choice, "bar") == 0 || std::strcmp(choice, "lines") == 0, "environment variable ZT_PROGRESS='",
             choice, "': use bar (a progress bar under the step lines) or lines (plain lines only)");
    return std::strcmp(choice, "bar") == 0;
  }
  const char* term = getenv("TERM");
  if (isatty(fileno(stream)) != 1 || (term != nullptr && std::strcmp(term, "dumb") == 0)) return false;
  // Under mpirun a rank's stdout is a pseudo-terminal that Open MPI forwards wherever mpirun's own
  // output goes, often a log file; that pty has no size (0 columns), a user's terminal has one.
  winsize size{};
  return ioctl(fileno(stream), TIOCGWINSZ, &size) == 0 && size.ws_col > 0;
}

void ConsoleProgress::erase_bar() {
  if (bar_.empty()) return;
  std::fputs(kEraseLine, stream_);
  bar_.clear();
}

void ConsoleProgress::step(const StepMetrics& metrics, bool print_line) {
  erase_bar();
  if (print_line) std::fprintf(stream_, "%s\n", metrics_console_line(metrics).c_str());
  if (terminal_) {
    bar_ = progress_bar_line(metrics, kBarWidth);
    std::fputs(bar_.c_str(), stream_);
  }
  std::fflush(stream_);
}

void ConsoleProgress::message(const std::string& line) {
  const std::string bar = bar_;
  erase_bar();
  std::fprintf(stream_, "%s\n", line.c_str());
  if (!bar.empty()) {  // put the bar back under the message
    bar_ = bar;
    std::fputs(bar_.c_str(), stream_);
  }
  std::fflush(stream_);
}

void ConsoleProgress::finish() {
  if (bar_.empty()) return;
  erase_bar();
  std::fflush(stream_);
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
