// The pipeline engine's instruction timeline (issue 32 item 8): with ZT_PIPE_TRACE=DIR in the
// environment, each rank appends one JSON line per optimizer step to DIR/rank<r>.jsonl:
//   {"rank", "stage", "step", "step_seconds", "compute_seconds", "wait_seconds", "bytes_sent",
//    "events": [{"op": "forward"|"backward"|"recompute"|"wait", "micro", "start", "end", "bytes"}]}
// with times in seconds from the start of the engine's step. compute: the forwards and backwards
// (a recomputed forward too); wait: a group of point-to-point exchanges, from its post to its
// completion, with the bytes this rank sent in it (the activations [B*T, C] and their gradients).
// bench/bench_pipe_engine.sh reads it: the bubble is 1 - compute / step per rank. Without the
// variable nothing is timed or written.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace zt {

class PipeTrace {
 public:
  // The trace ZT_PIPE_TRACE asks for (nullptr when it is unset or empty).
  static std::unique_ptr<PipeTrace> from_environment(int rank, int stage);

  void begin_step();
  double now() const;  // seconds since begin_step
  // An interval that started at `start` (now() then) and ends now.
  void record(const char* op, int micro_batch, double start, int64_t bytes = 0);
  void end_step();     // appends the step's line

 private:
  struct Event {
    const char* op;
    int micro_batch;
    double start, end;
    int64_t bytes;
  };
  PipeTrace(int rank, int stage, const std::string& path);
  int rank_, stage_;
  int64_t step_ = 0;
  std::ofstream out_;
  std::chrono::steady_clock::time_point step_start_;
  std::vector<Event> events_;
};

}  // namespace zt
