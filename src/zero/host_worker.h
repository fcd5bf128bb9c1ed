// HostWorker: one thread beside the calling thread that runs ZeRO-Offload's host optimizer work
// (docs/zero-offload.md): the delayed parameter update of a step during the next step's forward
// and backward, or the per-bucket update during the step's own last backward. Tasks run in the
// order posted; they touch host memory only (the calling thread keeps everything on the device).
//
// Its OpenMP team: the rank's threads (rank_threads.h: its share of the node's cores, or
// OMP_NUM_THREADS, as the calling thread reads omp_get_max_threads()) less one, the core of the
// calling thread, which keeps issuing device work meanwhile. A thread that set nothing would start
// OpenMP's default team, one thread per CPU of the process, beside the rank's own: on a node of
// several ranks, several times the cores. (On the CPU backend the calling thread's own team
// computes the forward and backward on the same cores: the worker there is for testing, not speed.)
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zt {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();  // runs what was posted, then ends the thread (an error there is dropped)
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  void post(std::function<void()> task);
  // Until every task posted so far has run; rethrows the first error of those (the tasks after a
  // failed one are dropped).
  void wait();

  static int team_threads();  // the worker's OpenMP threads (see above)

 private:
  void run(int threads);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  bool running_ = false;  // a task is running
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace zt
