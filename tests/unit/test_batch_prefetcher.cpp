// Tests of the background batch prefetcher (data/batch_prefetcher.h): steps come back in order
// and are built on another thread one step ahead (no further), exceptions from the worker reach
// take() with their type and message, destruction at any moment joins cleanly, and shard reads
// on the worker run concurrently with reads, opens and closes on the main thread (the HDF5 lock).
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/batch.h"
#include "data/batch_prefetcher.h"
#include "data/token_shards.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using zt::BatchPrefetcher;
using zt::StepBatches;
using zt::test::TempDir;

// A step whose one micro-batch records the step number in `batch`.
StepBatches marker_step(int64_t step) {
  StepBatches batches;
  batches.step = step;
  batches.micro.resize(1);
  batches.micro[0].batch = step;
  return batches;
}

// Waits (up to 5 s) until `condition` holds; false on timeout.
template <class Condition>
bool wait_for(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// 12 samples of lengths 300..3600 in three shards (reads span compressed chunks, so they take
// long enough to overlap); sample i's tokens are 100*i + t (mod vocab).
void write_dataset(const TempDir& dir) {
  zt::ShardAttributes attrs;
  attrs.vocab_size = 4096;
  attrs.pad_id = 0;
  attrs.tokenizer_sha256 = std::string(64, 'c');
  attrs.max_seq_len = 4096;
  for (int shard = 0; shard < 3; ++shard) {
    std::vector<zt::TokenSample> samples;
    for (int i = shard * 4; i < shard * 4 + 4; ++i) {
      zt::TokenSample sample;
      for (int t = 0; t < 300 * (i + 1); ++t) {
        sample.tokens.push_back((100 * i + t) % 4096);
        sample.loss_mask.push_back(t % 2 == 1 ? 1 : 0);
      }
      samples.push_back(sample);
    }
    zt::write_token_shard(dir.file("train-0000" + std::to_string(shard) + ".h5"), samples, attrs);
  }
}

// The sample indices of step s: four samples spread over the shards.
std::vector<int64_t> step_samples(int64_t step) {
  return {step % 12, (step * 5 + 1) % 12, (step * 7 + 3) % 12, (step + 9) % 12};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_prefetcher)

BOOST_AUTO_TEST_CASE(steps_in_order_built_on_another_thread_one_ahead) {
  const std::thread::id main_thread = std::this_thread::get_id();
  std::mutex calls_mutex;
  std::vector<int64_t> calls;  // the steps make_step was called for, in call order
  bool ran_on_main_thread = false;
  {
    BatchPrefetcher prefetcher(
        [&](int64_t step) {
          const std::lock_guard<std::mutex> lock(calls_mutex);
          calls.push_back(step);
          ran_on_main_thread = ran_on_main_thread || std::this_thread::get_id() == main_thread;
          return marker_step(step);
        },
        3, 10);
    for (int64_t step = 3; step < 10; ++step) {
      const StepBatches batches = prefetcher.take(step);
      BOOST_TEST(batches.step == step);
      BOOST_REQUIRE(batches.micro.size() == 1u);
      BOOST_TEST(batches.micro[0].batch == step);
      if (step + 1 < 10) {
        // The next step gets built while we "train" on this one...
        BOOST_TEST(wait_for([&] {
          const std::lock_guard<std::mutex> lock(calls_mutex);
          return static_cast<int64_t>(calls.size()) >= step + 1 - 3 + 1;
        }), "step " << step + 1 << " was not prefetched");
        // ...and no further (depth 1).
        std::this_thread::sleep_for(5ms);
        const std::lock_guard<std::mutex> lock(calls_mutex);
        BOOST_TEST(static_cast<int64_t>(calls.size()) == step + 1 - 3 + 1, "after taking step " << step);
      }
    }
    zt::test::check_error([&] { prefetcher.take(10); }, "past the last step 9");
  }
  BOOST_TEST(calls == (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9}), boost::test_tools::per_element());
  BOOST_TEST(!ran_on_main_thread);
}

BOOST_AUTO_TEST_CASE(steps_must_be_taken_in_order) {
  BatchPrefetcher prefetcher(marker_step, 0, 5);
  zt::test::check_error([&] { prefetcher.take(1); }, "step 1 asked for, but the next step is 0");
  BOOST_TEST(prefetcher.take(0).step == 0);
  zt::test::check_error([&] { prefetcher.take(0); }, "the next step is 1");
  BOOST_TEST(prefetcher.take(1).step == 1);
  zt::test::check_error([] { BatchPrefetcher(marker_step, 4, 2); }, "first step 4 is after the end step 2");
  BatchPrefetcher empty(marker_step, 7, 7);  // nothing to build
  zt::test::check_error([&] { empty.take(7); }, "past the last step 6");
}

BOOST_AUTO_TEST_CASE(worker_exceptions_reach_take_with_type_and_message) {
  const std::string message = "/data/train-00003.h5: HDF5 failed to read elements [0, 9) of 'tokens'";
  BatchPrefetcher prefetcher(
      [&](int64_t step) {
        if (step == 2) zt::fail(message);
        return marker_step(step);
      },
      0, 6);
  BOOST_TEST(prefetcher.take(0).step == 0);
  BOOST_TEST(prefetcher.take(1).step == 1);
  try {
    prefetcher.take(2);
    BOOST_ERROR("take(2) did not throw");
  } catch (const zt::Error& error) {
    BOOST_TEST(std::string(error.what()) == message);
  }

  // Not only zt::Error: the exception keeps its own type.
  BatchPrefetcher other([](int64_t) -> StepBatches { throw std::out_of_range("index 99 out of range"); }, 0, 3);
  BOOST_CHECK_EXCEPTION(other.take(0), std::out_of_range,
                        [](const std::out_of_range& error) { return std::string(error.what()) == "index 99 out of range"; });

  // make_step returning another step's batches is a bug reported the same way.
  BatchPrefetcher wrong([](int64_t step) { return marker_step(step + 1); }, 0, 3);
  zt::test::check_error([&] { wrong.take(0); }, "make_step(0) returned the batches of step 1");
}

BOOST_AUTO_TEST_CASE(destruction_at_any_moment_joins_cleanly) {
  std::atomic<int64_t> calls{0};
  auto slow_step = [&](int64_t step) {
    ++calls;
    std::this_thread::sleep_for(20ms);
    return marker_step(step);
  };
  const auto started = std::chrono::steady_clock::now();
  { BatchPrefetcher untouched(slow_step, 0, 1000); }           // destroyed while building step 0
  { BatchPrefetcher idle(slow_step, 0, 1000); std::this_thread::sleep_for(50ms); }  // step 0 built, waiting
  {
    BatchPrefetcher partly(slow_step, 0, 1000);
    BOOST_TEST(partly.take(0).step == 0);
    BOOST_TEST(partly.take(1).step == 1);
  }  // destroyed mid-run
  { BatchPrefetcher finished(marker_step, 0, 2); }             // worker already done
  const auto elapsed = std::chrono::steady_clock::now() - started;
  BOOST_TEST(elapsed < 5s, "destruction waited for the remaining steps (1000 x 20 ms)");
  const int64_t calls_after = calls.load();
  BOOST_TEST(calls_after <= 1 + 1 + 3);  // each prefetcher built at most one step beyond what was taken
  std::this_thread::sleep_for(50ms);
  BOOST_TEST(calls.load() == calls_after);  // no worker outlives its prefetcher
}

// The worker reads micro-batches while the main thread reads samples and opens and closes
// datasets: every result is what a single-threaded read gives, over several rounds. (Debian's
// libhdf5 1.10 happens to be built thread-safe, so here this checks the data path end to end;
// that our own lock serializes the calls, which matters with other HDF5 builds, is tested in
// token_shards/hdf5_calls_hold_the_process_wide_lock.)
BOOST_AUTO_TEST_CASE(worker_reads_concurrently_with_main_thread_reads) {
  TempDir dir;
  write_dataset(dir);
  const zt::TokenDataset dataset = zt::TokenDataset::open(dir.path.string());
  const int64_t steps = 24;
  std::vector<zt::MicroBatch> expected;  // [steps] built on this thread, before any concurrency
  for (int64_t step = 0; step < steps; ++step) expected.push_back(zt::make_micro_batch(dataset, step_samples(step), 0));
  std::vector<zt::TokenSample> expected_samples;  // [12]
  for (int64_t i = 0; i < 12; ++i) expected_samples.push_back(dataset.read_sample(i));

  for (int round = 0; round < 8; ++round) {
    BatchPrefetcher prefetcher(
        [&](int64_t step) {
          StepBatches batches;
          batches.step = step;
          const std::vector<int64_t> samples = step_samples(step);
          batches.micro.push_back(zt::make_micro_batch(dataset, std::span<const int64_t>(samples).first(2), 0));
          batches.micro.push_back(zt::make_micro_batch(dataset, std::span<const int64_t>(samples).subspan(2), 0));
          return batches;
        },
        0, steps);
    for (int64_t step = 0; step < steps; ++step) {
      // Meanwhile on this thread: reads of the same dataset, and another dataset opened and closed.
      for (int64_t i = 0; i < 12; ++i) {
        const zt::TokenSample sample = dataset.read_sample((i + step + round) % 12);
        BOOST_TEST((sample.tokens == expected_samples[static_cast<size_t>((i + step + round) % 12)].tokens));
      }
      {
        const zt::TokenDataset reopened = zt::TokenDataset::open(dir.path.string());
        BOOST_TEST(reopened.total_target_tokens() == dataset.total_target_tokens());
      }
      const StepBatches batches = prefetcher.take(step);
      BOOST_REQUIRE(batches.micro.size() == 2u);
      const zt::MicroBatch& whole = expected[static_cast<size_t>(step)];
      // The two halves are the whole batch's rows (each half padded to its own longest).
      for (size_t half = 0; half < 2; ++half) {
        const zt::MicroBatch& got = batches.micro[half];
        for (int64_t row = 0; row < got.batch; ++row) {
          const int64_t whole_row = static_cast<int64_t>(half) * 2 + row;
          for (int64_t t = 0; t < got.seq; ++t) {
            const int32_t want = t < whole.seq ? whole.input_ids[static_cast<size_t>(whole_row * whole.seq + t)] : 0;
            if (got.input_ids[static_cast<size_t>(row * got.seq + t)] != want) {
              BOOST_ERROR("round " << round << " step " << step << " half " << half << " row " << row << " position " << t);
              break;
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
