// GPU tests of the CUDA backend's fused softmax + cross-entropy against the CPU backend with a
// LLaMA vocabulary (V = 32000): masked and unmasked rows, a row of large logits, fp32 and
// bf16/fp16 logits, the gradient written in place (and not written when grad_scale = 0), and
// bad masks/targets. Bounds: loss 1e-5 relative (per-row fp32 sums, total in double in row
// order on both backends); dlogits fp32 1e-5, bf16/fp16 per gpu_test_util.h.
// cross_entropy_accumulate against cross_entropy on the same GPU, where both run the same
// kernels: the device sum equals the returned sums added in order, and the dlogits are equal,
// bit for bit; bad loss_sum arguments throw at once, bad masks/targets at the next
// synchronisation (synchronize() or an event's wait()).
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

constexpr int64_t kRows = 12, kVocab = 32000;

BOOST_AUTO_TEST_SUITE(cuda_loss)

BOOST_AUTO_TEST_CASE(cross_entropy_over_a_large_vocabulary) {
  std::vector<int32_t> targets = random_ids(kRows, 1, static_cast<int32_t>(kVocab));
  std::vector<uint8_t> mask = {0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1};
  targets[0] = -1;  // an unmasked row's target is not read
  DeviceTensor targets_d = upload_integers(targets, {kRows});
  DeviceTensor mask_d = upload_integers(mask, {kRows});
  const float grad_scale = 1.0f / 9.0f;
  for (DType dtype : float_dtypes()) {
    std::vector<float> logits = random_floats(kRows * kVocab, 2, -4.0f, 4.0f);
    for (int64_t j = 0; j < kVocab; ++j) logits[static_cast<size_t>(3 * kVocab + j)] += 60.0f;  // large
    logits[static_cast<size_t>(5 * kVocab + targets[5])] = 9.0f;  // the target is the row max
    logits = rounded(logits, dtype);
    std::vector<float> cpu_grad = logits;
    const double expected = cpu().cross_entropy(view(cpu_grad, {kRows, kVocab}), view(targets, {kRows}),
                                                view(mask, {kRows}), grad_scale);
    DeviceTensor logits_d = upload(logits, dtype, {kRows, kVocab});
    const double actual = gpu().cross_entropy(logits_d, targets_d, mask_d, grad_scale);
    BOOST_TEST(actual == expected, boost::test_tools::tolerance(1e-5));
    check_near(download(logits_d), cpu_grad, dtype, 1e-5, "cross_entropy dlogits");

    // grad_scale 0: the loss only; logits untouched.
    DeviceTensor untouched = upload(logits, dtype, {kRows, kVocab});
    const double loss_only = gpu().cross_entropy(untouched, targets_d, mask_d, 0.0f);
    BOOST_TEST(loss_only == expected, boost::test_tools::tolerance(1e-5));
    check_identical(download(untouched), logits, "logits with grad_scale 0");
  }
}

BOOST_AUTO_TEST_CASE(nan_logit_makes_the_loss_nan) {
  std::vector<float> logits = random_floats(2 * 1000, 3);
  logits[1500] = kNaN;
  DeviceTensor logits_d = upload(logits, DType::F32, {2, 1000});
  DeviceTensor targets = upload_integers(std::vector<int32_t>{1, 2}, {2});
  DeviceTensor mask = upload_integers(std::vector<uint8_t>{1, 1}, {2});
  BOOST_TEST(std::isnan(gpu().cross_entropy(logits_d, targets, mask, 0.5f)));
}

BOOST_AUTO_TEST_CASE(bad_mask_and_targets_are_reported) {
  DeviceTensor logits = upload(random_floats(4 * 10, 4), DType::F32, {4, 10});
  DeviceTensor targets = upload_integers(std::vector<int32_t>{1, 2, 3, 4}, {4});
  DeviceTensor bad_mask = upload_integers(std::vector<uint8_t>{1, 0, 0, 2}, {4});
  zt::test::check_error_mentions([&] { gpu().cross_entropy(logits, targets, bad_mask, 1.0f); },
                                 {"cross_entropy", "mask[3] = 2"});
  DeviceTensor mask = upload_integers(std::vector<uint8_t>{1, 1, 0, 1}, {4});
  DeviceTensor bad_targets = upload_integers(std::vector<int32_t>{1, 10, 99, 4}, {4});
  zt::test::check_error_mentions([&] { gpu().cross_entropy(logits, bad_targets, mask, 1.0f); },
                                 {"cross_entropy", "targets[1] = 10", "[0, 10)"});
}

// ---- cross_entropy_accumulate ----------------------------------------------------------------

constexpr int64_t kSmallVocab = 1003;  // not a multiple of the 8-element vectors

// One micro-batch: logits[rows, kSmallVocab] rounded to the dtype, targets int32[rows], mask
// uint8[rows] with about one row in five masked out.
struct MicroBatch {
  int64_t rows = 0;
  std::vector<float> logits;    // [rows, kSmallVocab]
  std::vector<int32_t> targets; // [rows]
  std::vector<uint8_t> mask;    // [rows]
};

MicroBatch micro_batch(int64_t rows, DType dtype, uint32_t seed) {
  MicroBatch batch;
  batch.rows = rows;
  batch.logits = rounded(random_floats(static_cast<size_t>(rows * kSmallVocab), seed, -6.0f, 6.0f), dtype);
  batch.targets = random_ids(static_cast<size_t>(rows), seed + 1, static_cast<int32_t>(kSmallVocab));
  for (int32_t id : random_ids(static_cast<size_t>(rows), seed + 2, 5))
    batch.mask.push_back(id == 0 ? uint8_t{0} : uint8_t{1});
  batch.mask[0] = 1;  // at least one token, so the sum is not 0
  return batch;
}

// An fp64 [1] accumulator on the GPU holding `value`.
DeviceTensor loss_accumulator(double value) {
  DeviceTensor sum = device_tensor(DType::F64, {1});
  gpu().copy(sum, Tensor(&value, DType::F64, {1}));
  return sum;
}

double read_accumulator(const DeviceTensor& sum) {
  double value = 0.0;  // [1]
  gpu().copy(Tensor(&value, DType::F64, {1}), sum);
  return value;
}

// Bitwise equality of two doubles (the test's point: no rounding difference at all).
void check_same_bits(double actual, double expected, const std::string& what) {
  BOOST_TEST(std::bit_cast<uint64_t>(actual) == std::bit_cast<uint64_t>(expected),
             what << ": " << std::hexfloat << actual << " != expected " << expected);
}

BOOST_AUTO_TEST_CASE(accumulate_adds_what_cross_entropy_returns_bit_for_bit) {
  // Row counts: more than a warp and not a multiple of it, exactly one warp, less than one.
  const int64_t rows_per_batch[] = {77, 32, 5};
  const float grad_scale = 1.0f / 91.0f;
  const double start_values[] = {0.0, 12345.678901234567};  // the second is no float
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (double start : start_values) {
      double expected = start;  // the returned sums added in order, as the trainer would
      DeviceTensor loss_sum = loss_accumulator(start);
      for (int b = 0; b < 3; ++b) {
        const MicroBatch batch = micro_batch(rows_per_batch[b], dtype, static_cast<uint32_t>(20 + 3 * b));
        const int64_t rows = batch.rows;
        DeviceTensor targets = upload_integers(batch.targets, {rows});
        DeviceTensor mask = upload_integers(batch.mask, {rows});
        DeviceTensor returned_logits = upload(batch.logits, dtype, {rows, kSmallVocab});
        DeviceTensor accumulated_logits = upload(batch.logits, dtype, {rows, kSmallVocab});
        const double returned = gpu().cross_entropy(returned_logits, targets, mask, grad_scale);
        BOOST_TEST(std::isfinite(returned));
        BOOST_TEST(returned > 0.0);
        expected += returned;
        gpu().cross_entropy_accumulate(accumulated_logits, targets, mask, grad_scale, loss_sum);
        const std::string what = std::string("batch ") + std::to_string(b) + " (" + dtype_name(dtype) + ")";
        check_identical(download(accumulated_logits), download(returned_logits), "dlogits of " + what);
        check_same_bits(read_accumulator(loss_sum), expected, "loss_sum after " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(accumulate_with_grad_scale_zero_leaves_the_logits) {
  const MicroBatch batch = micro_batch(40, DType::F32, 30);
  DeviceTensor targets = upload_integers(batch.targets, {batch.rows});
  DeviceTensor mask = upload_integers(batch.mask, {batch.rows});
  DeviceTensor logits = upload(batch.logits, DType::F32, {batch.rows, kSmallVocab});
  const double returned = gpu().cross_entropy(logits, targets, mask, 0.0f);
  DeviceTensor loss_sum = loss_accumulator(0.0);
  gpu().cross_entropy_accumulate(logits, targets, mask, 0.0f, loss_sum);
  check_same_bits(read_accumulator(loss_sum), returned, "loss_sum with grad_scale 0");
  check_identical(download(logits), batch.logits, "logits with grad_scale 0");
}

BOOST_AUTO_TEST_CASE(accumulate_rejects_a_bad_loss_sum) {
  const MicroBatch batch = micro_batch(4, DType::F32, 40);
  DeviceTensor targets = upload_integers(batch.targets, {4});
  DeviceTensor mask = upload_integers(batch.mask, {4});
  DeviceTensor logits = upload(batch.logits, DType::F32, {4, kSmallVocab});
  auto accumulate_into = [&](Tensor loss_sum) {
    gpu().cross_entropy_accumulate(logits, targets, mask, 1.0f, loss_sum);
  };
  DeviceTensor fp32_sum = device_tensor(DType::F32, {1});
  zt::test::check_error_mentions([&] { accumulate_into(fp32_sum); },
                                 {"cross_entropy_accumulate", "loss_sum", "fp64"});
  DeviceTensor two_sums = device_tensor(DType::F64, {2});
  zt::test::check_error_mentions([&] { accumulate_into(two_sums); },
                                 {"cross_entropy_accumulate", "loss_sum", "one fp64 accumulator"});
  double host_sum = 0.0;  // [1]
  zt::test::check_error_mentions([&] { accumulate_into(Tensor(&host_sum, DType::F64, {1})); },
                                 {"cross_entropy_accumulate", "loss_sum", "device memory"});
  // Host memory labelled as device memory: only the driver can tell.
  zt::test::check_error_mentions([&] { accumulate_into(Tensor(&host_sum, DType::F64, {1}, Device::CUDA)); },
                                 {"cross_entropy_accumulate", "loss_sum", "this backend's GPU"});
  // The checks come before any work is queued: the logits are still the logits.
  check_identical(download(logits), batch.logits, "logits after rejected calls");
  BOOST_TEST(host_sum == 0.0);
}

BOOST_AUTO_TEST_CASE(accumulate_reports_bad_targets_and_masks_at_the_next_synchronisation) {
  const MicroBatch batch = micro_batch(4, DType::F32, 50);
  DeviceTensor logits = upload(batch.logits, DType::F32, {4, kSmallVocab});
  DeviceTensor mask = upload_integers(std::vector<uint8_t>{1, 1, 0, 1}, {4});
  DeviceTensor bad_targets = upload_integers(std::vector<int32_t>{1, static_cast<int32_t>(kSmallVocab), 2, 3}, {4});
  DeviceTensor loss_sum = loss_accumulator(0.0);
  BOOST_CHECK_NO_THROW(gpu().cross_entropy_accumulate(logits, bad_targets, mask, 1.0f, loss_sum));
  zt::test::check_error_mentions([&] { gpu().synchronize(); },
                                 {"cross_entropy_accumulate", "target", "outside the vocabulary"});
  BOOST_CHECK_NO_THROW(gpu().synchronize());  // reported once, then cleared
  BOOST_TEST(std::isnan(read_accumulator(loss_sum)), "a bad row makes the sum NaN");

  DeviceTensor targets = upload_integers(std::vector<int32_t>{1, 2, 3, 4}, {4});
  DeviceTensor bad_mask = upload_integers(std::vector<uint8_t>{1, 0, 0, 2}, {4});
  DeviceTensor other_sum = loss_accumulator(0.0);
  BOOST_CHECK_NO_THROW(gpu().cross_entropy_accumulate(logits, targets, bad_mask, 1.0f, other_sum));
  std::unique_ptr<BackendEvent> done = gpu().record_event();
  zt::test::check_error_mentions([&] { done->wait(); }, {"cross_entropy_accumulate", "mask", "0 or 1"});
  BOOST_CHECK_NO_THROW(gpu().synchronize());
  BOOST_TEST(std::isnan(read_accumulator(other_sum)), "a bad row makes the sum NaN");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
