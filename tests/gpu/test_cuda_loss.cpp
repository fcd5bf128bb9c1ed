// GPU tests of the CUDA backend's fused softmax + cross-entropy against the CPU backend with a
// LLaMA vocabulary (V = 32000): masked and unmasked rows, a row of large logits, fp32 and
// bf16/fp16 logits, the gradient written in place (and not written when grad_scale = 0), and
// bad masks/targets. Bounds: loss 1e-5 relative (per-row fp32 sums, total in double in row
// order on both backends); dlogits fp32 1e-5, bf16/fp16 per gpu_test_util.h.
#include <boost/test/unit_test.hpp>

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

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
