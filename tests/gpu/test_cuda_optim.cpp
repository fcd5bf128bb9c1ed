// GPU tests of the CUDA backend's AdamW against the CPU backend over several steps: weight
// decay, both forms of torch's lerp (1 - beta1 below and above 0.5), with and without bias
// correction. Bound: 1e-6 relative (an ulp or so: the CPU build may fuse multiply-adds, the
// kernel rounds every operation as written), plus an absolute floor of about an ulp of the
// inputs where the result cancels: exp_avg = m + w (g - m) is far smaller than g when m is
// close to g (|g| <= 0.1, an ulp 7.5e-9: 1e-8), and param's step is small against |param| <= 1
// (1e-7). exp_avg_sq sums positive terms and needs no floor. (The emulated device found the
// cancellation: 175 of 10007 exp_avg elements were 2e-5 apart relative.)
#include <boost/test/unit_test.hpp>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

BOOST_AUTO_TEST_SUITE(cuda_optim)

BOOST_AUTO_TEST_CASE(adamw_matches_the_cpu_over_steps) {
  const int64_t n = 10007;
  struct Setting {
    double lr, beta1, beta2, weight_decay;
    bool bias_correction;
  };
  const Setting settings[] = {{1e-3, 0.9, 0.999, 0.1, true}, {3e-2, 0.4, 0.95, 0.0, true},
                              {1e-2, 0.9, 0.99, 0.01, false}};
  uint32_t seed = 1;
  for (const Setting& setting : settings) {
    std::vector<float> param = random_floats(n, seed++), m(n, 0.0f), v(n, 0.0f);
    DeviceTensor param_d = upload(param, DType::F32, {n});
    DeviceTensor m_d = upload(m, DType::F32, {n}), v_d = upload(v, DType::F32, {n});
    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<float> grad = random_floats(n, seed++, -0.1f, 0.1f);
      DeviceTensor grad_d = upload(grad, DType::F32, {n});
      AdamWParams params;
      params.lr = setting.lr;
      params.beta1 = setting.beta1;
      params.beta2 = setting.beta2;
      params.weight_decay = setting.weight_decay;
      params.bias_correction = setting.bias_correction;
      params.step = step;
      cpu().adamw(view(param, {n}), view(grad, {n}), view(m, {n}), view(v, {n}), params);
      gpu().adamw(param_d, grad_d, m_d, v_d, params);
    }
    const std::string what = cat("adamw lr ", setting.lr, " beta1 ", setting.beta1);
    zt::test::check_close(download(param_d), param, 1e-6, 1e-7, what + " param");
    zt::test::check_close(download(m_d), m, 1e-6, 1e-8, what + " exp_avg");
    zt::test::check_close(download(v_d), v, 1e-6, 0.0, what + " exp_avg_sq");
  }
}

BOOST_AUTO_TEST_CASE(adamw_wants_fp32_buffers) {
  DeviceTensor half = device_tensor(DType::BF16, {8});
  DeviceTensor full = device_tensor(DType::F32, {8});
  zt::test::check_error_mentions([&] { gpu().adamw(half, full, full, full, AdamWParams{}); },
                                 {"adamw", "param", "fp32"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
