// The batch prefetcher's worker loop and hand-over (see batch_prefetcher.h).
#include "data/batch_prefetcher.h"

#include <utility>

#include "core/error.h"

namespace zt {

BatchPrefetcher::BatchPrefetcher(std::function<StepBatches(int64_t step)> make_step, int64_t first_step,
                                 int64_t end_step)
    : make_step_(std::move(make_step)), first_step_(first_step), end_step_(end_step), next_to_take_(first_step) {
  ZT_CHECK(make_step_, "BatchPrefetcher: no make_step function given");
  ZT_CHECK(first_step <= end_step, "BatchPrefetcher: first step ", first_step, " is after the end step ", end_step);
  worker_ = std::thread([this] { run(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void BatchPrefetcher::run() {
  for (int64_t step = first_step_; step < end_step_; ++step) {
    {  // Wait until the previous step was taken (depth 1), or until asked to stop.
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !ready_.has_value(); });
      if (stopping_) return;
    }
    // Build outside the lock: the caller may meanwhile take nothing, or be destroying us.
    std::optional<StepBatches> built;
    std::exception_ptr failure;
    try {
      built = make_step_(step);
      ZT_CHECK(built->step == step, "BatchPrefetcher: make_step(", step, ") returned the batches of step ",
               built->step);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (failure) {
        failure_ = failure;
      } else {
        ready_ = std::move(built);
      }
    }
    changed_.notify_all();
    if (failure) return;
  }
}

StepBatches BatchPrefetcher::take(int64_t step) {
  ZT_CHECK(step == next_to_take_, "BatchPrefetcher: step ", step, " asked for, but the next step is ", next_to_take_);
  ZT_CHECK(step < end_step_, "BatchPrefetcher: step ", step, " is past the last step ", end_step_ - 1);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return ready_.has_value() || failure_ != nullptr; });
  if (!ready_.has_value()) std::rethrow_exception(failure_);
  StepBatches batches = std::move(*ready_);
  ready_.reset();
  ++next_to_take_;
  lock.unlock();
  changed_.notify_all();  // the worker may build the next step now
  return batches;
}

}  // namespace zt
