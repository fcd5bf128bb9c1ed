// The pipeline engine's instruction timeline (pipe_trace.h).
#include "train/pipe_trace.h"

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt {

std::unique_ptr<PipeTrace> PipeTrace::from_environment(int rank, int stage) {
  const char* dir = std::getenv("ZT_PIPE_TRACE");
  if (!dir || !*dir) return nullptr;
  std::filesystem::create_directories(dir);
  return std::unique_ptr<PipeTrace>(new PipeTrace(rank, stage, cat(dir, "/rank", rank, ".jsonl")));
}

PipeTrace::PipeTrace(int rank, int stage, const std::string& path) : rank_(rank), stage_(stage), out_(path) {
  ZT_CHECK(out_, path, ": cannot open the pipeline trace (ZT_PIPE_TRACE) for writing");
}

void PipeTrace::begin_step() {
  events_.clear();
  step_start_ = std::chrono::steady_clock::now();
}

double PipeTrace::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
}

void PipeTrace::record(const char* op, int micro_batch, double start, int64_t bytes) {
  events_.push_back({op, micro_batch, start, now(), bytes});
}

void PipeTrace::end_step() {
  const double step_seconds = now();
  double compute = 0.0, wait = 0.0;
  int64_t sent = 0;
  nlohmann::json events = nlohmann::json::array();
  for (const Event& event : events_) {
    (std::string(event.op) == "wait" ? wait : compute) += event.end - event.start;
    sent += event.bytes;
    events.push_back({{"op", event.op}, {"micro", event.micro_batch}, {"start", event.start}, {"end", event.end},
                      {"bytes", event.bytes}});
  }
  const nlohmann::json line = {{"rank", rank_},          {"stage", stage_},        {"step", step_++},
                               {"step_seconds", step_seconds}, {"compute_seconds", compute},
                               {"wait_seconds", wait},   {"bytes_sent", sent},     {"events", events}};
  out_ << line.dump() << "\n";
  out_.flush();
}

}  // namespace zt
