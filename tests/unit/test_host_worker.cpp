// HostWorker (zero/host_worker.h), ZeRO-Offload's host optimizer thread: tasks run in order; its
// OpenMP team is the calling thread's threads less one (at least one), not OpenMP's default of a
// thread per CPU that a new thread starts with; a failed task's error reaches wait() and the tasks
// after it are dropped; the worker is usable again after that.
#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <stdexcept>
#include <vector>

#include "zero/host_worker.h"

BOOST_AUTO_TEST_SUITE(host_worker)

BOOST_AUTO_TEST_CASE(team_is_the_callers_threads_less_one) {
  const int before = omp_get_max_threads();
  for (const int threads : {3, 1}) {
    omp_set_num_threads(threads);
    zt::HostWorker worker;
    int team = 0;
    worker.post([&team] {
#pragma omp parallel
      {
#pragma omp single
        team = omp_get_num_threads();
      }
    });
    worker.wait();
    BOOST_TEST(team == (threads > 1 ? threads - 1 : 1), "caller's threads " << threads << ": worker team " << team);
  }
  omp_set_num_threads(before);
}

BOOST_AUTO_TEST_CASE(order_errors_and_reuse) {
  zt::HostWorker worker;
  std::vector<int> ran;
  for (int k = 0; k < 3; ++k) worker.post([&ran, k] { ran.push_back(k); });
  worker.post([] { throw std::runtime_error("task failed"); });
  worker.post([&ran] { ran.push_back(99); });  // after the failure: dropped
  BOOST_CHECK_THROW(worker.wait(), std::runtime_error);
  BOOST_TEST(ran == std::vector<int>({0, 1, 2}), "the tasks before the failure ran in order, none after");
  worker.post([&ran] { ran.push_back(3); });
  worker.wait();  // the error was reported once
  BOOST_TEST(ran.back() == 3);
}

BOOST_AUTO_TEST_SUITE_END()
