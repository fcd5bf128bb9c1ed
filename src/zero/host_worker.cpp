// HostWorker (see host_worker.h).
#include "zero/host_worker.h"

#include <omp.h>

#include <algorithm>
#include <utility>

namespace zt {

int HostWorker::team_threads() { return std::max(1, omp_get_max_threads() - 1); }

HostWorker::HostWorker() : thread_([this, threads = team_threads()] { run(threads); }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void HostWorker::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  changed_.notify_all();
}

void HostWorker::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return tasks_.empty() && !running_; });
  if (std::exception_ptr error = std::exchange(error_, nullptr)) std::rethrow_exception(error);
}

void HostWorker::run(int threads) {
  omp_set_num_threads(threads);  // this thread's own team (host_worker.h)
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, with everything run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    if (error_) {  // after a failed task: dropped (wait() reports the failure)
      changed_.notify_all();
      continue;
    }
    running_ = true;
    lock.unlock();
    try {
      task();
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      running_ = false;
      changed_.notify_all();
      continue;
    }
    lock.lock();
    running_ = false;
    changed_.notify_all();
  }
}

}  // namespace zt
