// Background prefetch of training batches: one worker thread builds the micro-batches of step
// s+1 (reading the shards) while the caller trains on step s, so data reading overlaps compute.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/batch.h"

namespace zt {

// Everything one optimizer step consumes on this rank: its micro-batches in accumulation order.
struct StepBatches {
  int64_t step = 0;
  std::vector<MicroBatch> micro;  // [accumulation steps]
};

// Calls make_step(first_step), make_step(first_step + 1), ..., make_step(end_step - 1) in order
// on one background thread, at most one step ahead of the caller (depth 1: the step being built
// plus none waiting beyond the one take() will return next). make_step runs on that thread, so
// what it touches must be safe to use from there (TokenDataset reads are: see hdf5_mutex()).
class BatchPrefetcher {
 public:
  explicit BatchPrefetcher(std::function<StepBatches(int64_t step)> make_step, int64_t first_step, int64_t end_step);
  // Stops the worker (it finishes the make_step call it is in, if any) and joins it.
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The batches of `step`, waiting for them if the worker is still building them. Steps must be
  // taken in order, each once. An exception thrown by make_step (for this step) is rethrown here,
  // on the caller's thread, as it was thrown (same type, same message).
  StepBatches take(int64_t step);

 private:
  void run();

  std::function<StepBatches(int64_t)> make_step_;
  const int64_t first_step_;
  const int64_t end_step_;
  int64_t next_to_take_;  // the step take() must be asked for next (used by the caller's thread only)

  std::mutex mutex_;                 // guards the members below
  std::condition_variable changed_;  // ready_/failure_/stopping_ changed
  std::optional<StepBatches> ready_;  // the built step nobody has taken yet
  std::exception_ptr failure_;        // what make_step threw (the worker then stops)
  bool stopping_ = false;

  std::thread worker_;  // last: starts after everything it uses is constructed
};

}  // namespace zt
