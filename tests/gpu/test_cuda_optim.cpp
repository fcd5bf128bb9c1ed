// GPU tests of the CUDA backend's optimizer kernels against the CPU backend over several steps
// (AdaLomo's three ops: see their case below).
// SGD: plain, momentum with dampening and weight decay, Nesterov (the first step copies the
// gradient into the buffer). LAMB's per-element pass: both eps placements, the update written
// over the gradient as the optimizer runs it. Bound: 1e-6 relative (an ulp or so: the CPU
// build may fuse multiply-adds, the kernels round every operation as written), plus an
// absolute floor of about an ulp of the inputs where the result cancels (|g| <= 0.1, an ulp
// 7.5e-9: 1e-8 for exp_avg; 1e-7 for param against |param| <= 1).
// AdamW against the CPU backend over several steps: weight
// decay, both forms of torch's lerp (1 - beta1 below and above 0.5), with and without bias
// correction. Bit for bit: both round every operation as written (the kernel with _rn
// intrinsics, cpu_adamw compiled without contraction) from the same fp32 constants
// (backend/adamw_constants.h). (Before the CPU side stopped fusing multiply-adds, the emulated
// device found 175 of 10007 exp_avg elements 2e-5 apart relative, where m + w (g - m) cancels.)
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

// The optimizer kernels of the shared test backends (backend/optimizer_kernels.h).
OptimizerKernels& cpu_kernels() { return cpu().optimizer_kernels(); }
OptimizerKernels& gpu_kernels() { return gpu().optimizer_kernels(); }

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
      cpu_kernels().adamw(view(param, {n}), view(grad, {n}), view(m, {n}), view(v, {n}), params);
      gpu_kernels().adamw(param_d, grad_d, m_d, v_d, params);
    }
    const std::string what = cat("adamw lr ", setting.lr, " beta1 ", setting.beta1);
    check_identical(download(param_d), param, what + " param");
    check_identical(download(m_d), m, what + " exp_avg");
    check_identical(download(v_d), v, what + " exp_avg_sq");
  }
}

BOOST_AUTO_TEST_CASE(sgd_matches_the_cpu_over_steps) {
  const int64_t n = 10007;
  const SgdParams settings[] = {{1e-2, 0.0, 0.0, 0.0, false, true},
                                {5e-2, 0.9, 0.1, 0.01, false, true},
                                {2e-1, 0.8, 0.0, 0.05, true, true}};
  uint32_t seed = 100;
  for (const SgdParams& setting : settings) {
    std::vector<float> param = random_floats(n, seed++), buffer(n, 0.0f);
    DeviceTensor param_d = upload(param, DType::F32, {n}), buffer_d = upload(buffer, DType::F32, {n});
    const bool momentum = setting.momentum != 0.0;
    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<float> grad = random_floats(n, seed++, -0.1f, 0.1f);
      DeviceTensor grad_d = upload(grad, DType::F32, {n});
      SgdParams params = setting;
      params.first_step = step == 1;
      cpu_kernels().sgd(view(param, {n}), view(grad, {n}), momentum ? view(buffer, {n}) : Tensor(), params);
      gpu_kernels().sgd(param_d, grad_d, momentum ? Tensor(buffer_d) : Tensor(), params);
    }
    const std::string what = cat("sgd momentum ", setting.momentum, " nesterov ", setting.nesterov);
    zt::test::check_close(download(param_d), param, 1e-6, 1e-7, what + " param");
    // The buffer cancels (momentum b + (1 - dampening) d with opposite signs) and the CPU loop may
    // fuse its multiply-adds: a floor of a few ulps of the products' size (~0.1: 7.5e-9 each).
    if (momentum) zt::test::check_close(download(buffer_d), buffer, 1e-6, 1e-7, what + " momentum_buffer");
  }
}

BOOST_AUTO_TEST_CASE(lamb_direction_matches_the_cpu_over_steps) {
  const int64_t n = 10007;
  uint32_t seed = 200;
  for (const bool inside : {false, true}) {
    std::vector<float> param = random_floats(n, seed++), m(n, 0.0f), v(n, 0.0f), update;
    DeviceTensor param_d = upload(param, DType::F32, {n});
    DeviceTensor m_d = upload(m, DType::F32, {n}), v_d = upload(v, DType::F32, {n});
    LambParams params;
    params.beta2 = 0.95;
    params.weight_decay = 0.01;
    params.eps_inside_sqrt = inside;
    DeviceTensor update_d = upload(std::vector<float>(n, 0.0f), DType::F32, {n});
    for (int64_t step = 1; step <= 4; ++step) {
      update = random_floats(n, seed++, -0.1f, 0.1f);  // the gradient, overwritten by the update
      update_d = upload(update, DType::F32, {n});
      cpu_kernels().lamb_direction(view(update, {n}), view(param, {n}), view(update, {n}), view(m, {n}), view(v, {n}), params);
      gpu_kernels().lamb_direction(update_d, param_d, update_d, m_d, v_d, params);
    }
    const std::string what = cat("lamb_direction eps inside sqrt ", inside);
    zt::test::check_close(download(update_d), update, 1e-6, 1e-7, what + " update");
    zt::test::check_close(download(m_d), m, 1e-6, 1e-8, what + " exp_avg");
    zt::test::check_close(download(v_d), v, 1e-6, 0.0, what + " exp_avg_sq");
  }
}

// AdaLomo's three ops as the optimizer runs them on one tensor cut into three ranks' slices
// (the cuts fall inside rows): each slice's row/column sums, added over the slices, then the
// moments (whole) and each slice's direction, over several steps with beta2t varying. A matrix
// of 150 x 129 (more than one 32-column strip and 64-row chunk of the column sums) and a
// vector. Bound: the row and column sums are fp32 block/chunk trees on the device, double on
// the CPU (1e-5); the rest rounds each operation as the CPU does (1e-6).
BOOST_AUTO_TEST_CASE(adalomo_ops_match_the_cpu_over_steps) {
  const int64_t rows = 150;
  uint32_t seed = 300;
  for (const int64_t cols : {int64_t{129}, int64_t{0}}) {  // 0: a vector of `rows` elements
    const bool matrix = cols > 0;
    const int64_t width = matrix ? cols : 1, numel = rows * width;
    const int64_t cuts[] = {0, numel / 3 + 5, 2 * numel / 3 - 7, numel};  // three slices, rows cut inside
    std::vector<float> row(rows, 0.0f), col(matrix ? cols : 0, 0.0f), row_total(rows), col_total(col.size());
    DeviceTensor row_d = upload(row, DType::F32, {rows});
    DeviceTensor col_d = matrix ? upload(col, DType::F32, {cols}) : DeviceTensor{};
    DeviceTensor row_sums_d = device_tensor(DType::F32, {rows});
    DeviceTensor col_sums_d = matrix ? device_tensor(DType::F32, {cols}) : DeviceTensor{};
    DeviceTensor row_total_d = device_tensor(DType::F32, {rows});
    DeviceTensor col_total_d = matrix ? device_tensor(DType::F32, {cols}) : DeviceTensor{};
    std::vector<float> grad, update(numel);
    DeviceTensor grad_d;
    for (int64_t step = 1; step <= 3; ++step) {
      grad = random_floats(numel, seed++, -0.1f, 0.1f);
      grad_d = upload(grad, DType::F32, {numel});
      std::fill(row_total.begin(), row_total.end(), 0.0f);
      std::fill(col_total.begin(), col_total.end(), 0.0f);
      gpu().fill(row_total_d, 0.0f);
      if (matrix) gpu().fill(col_total_d, 0.0f);
      for (int slice = 0; slice < 3; ++slice) {  // the sum over ranks
        const int64_t begin = cuts[slice], n = cuts[slice + 1] - begin;
        std::vector<float> row_sums(rows), col_sums(col.size());
        cpu_kernels().adalomo_square_sums(view(row_sums, {rows}), matrix ? view(col_sums, {cols}) : Tensor(),
                                          view(grad, {numel}).rows(begin, n), begin, 1e-6f);
        gpu_kernels().adalomo_square_sums(row_sums_d, col_sums_d, Tensor(grad_d).rows(begin, n), begin, 1e-6f);
        cpu().accumulate(view(row_total, {rows}), view(row_sums, {rows}), 1.0f);
        gpu().accumulate(row_total_d, row_sums_d, 1.0f);
        if (matrix) {
          cpu().accumulate(view(col_total, {cols}), view(col_sums, {cols}), 1.0f);
          gpu().accumulate(col_total_d, col_sums_d, 1.0f);
        }
      }
      const std::string what = cat(matrix ? "matrix" : "vector", " step ", step);
      zt::test::check_close(download(row_total_d), row_total, 1e-5, 0.0, what + " row sums");
      if (matrix) zt::test::check_close(download(col_total_d), col_total, 1e-5, 0.0, what + " column sums");
      const float beta2t = static_cast<float>(1.0 - std::pow(static_cast<double>(step), -0.8));
      const double cpu_mean = cpu_kernels().adalomo_moments(view(row, {rows}), matrix ? view(col, {cols}) : Tensor(),
                                                            view(row_total, {rows}), matrix ? view(col_total, {cols}) : Tensor(),
                                                            beta2t);
      const double gpu_mean = gpu_kernels().adalomo_moments(row_d, col_d, row_total_d, col_total_d, beta2t);
      BOOST_TEST(std::fabs(gpu_mean - cpu_mean) <= 1e-5 * cpu_mean, what << " mean(row) " << gpu_mean << " vs " << cpu_mean);
      zt::test::check_close(download(row_d), row, 1e-5, 0.0, what + " exp_avg_sq_row");
      if (matrix) zt::test::check_close(download(col_d), col, 1e-5, 0.0, what + " exp_avg_sq_col");
      for (int slice = 0; slice < 3; ++slice) {  // the update written over each slice's gradient
        const int64_t begin = cuts[slice], n = cuts[slice + 1] - begin;
        Tensor grad_slice = view(grad, {numel}).rows(begin, n), grad_slice_d = Tensor(grad_d).rows(begin, n);
        cpu_kernels().adalomo_direction(grad_slice, grad_slice, view(row, {rows}), matrix ? view(col, {cols}) : Tensor(), begin,
                                        static_cast<float>(cpu_mean));
        gpu_kernels().adalomo_direction(grad_slice_d, grad_slice_d, row_d, col_d, begin, static_cast<float>(cpu_mean));
      }
      zt::test::check_close(download(grad_d), grad, 1e-5, 0.0, what + " update");
    }
  }
}

BOOST_AUTO_TEST_CASE(adalomo_ops_check_the_slice) {
  DeviceTensor row = device_tensor(DType::F32, {4}), col = device_tensor(DType::F32, {3});
  DeviceTensor grad = device_tensor(DType::F32, {5});
  zt::test::check_error_mentions([&] { gpu_kernels().adalomo_square_sums(row, col, grad, 8, 0.0f); },
                                 {"adalomo_square_sums", "grad's 5 elements at offset 8", "[4, 3]"});
  zt::test::check_error_mentions([&] { gpu_kernels().adalomo_direction(grad, grad, row, col, 9, 1.0f); },
                                 {"adalomo_direction", "offset 9"});
  DeviceTensor half = device_tensor(DType::BF16, {5});
  zt::test::check_error_mentions([&] { gpu_kernels().adalomo_direction(half, grad, row, col, 0, 1.0f); },
                                 {"adalomo_direction", "update", "fp32"});
}

BOOST_AUTO_TEST_CASE(sgd_wants_a_momentum_buffer_with_momentum) {
  DeviceTensor full = device_tensor(DType::F32, {8});
  SgdParams params;
  params.momentum = 0.9;
  zt::test::check_error_mentions([&] { gpu_kernels().sgd(full, full, Tensor(), params); }, {"sgd", "momentum_buffer"});
}

BOOST_AUTO_TEST_CASE(adamw_wants_fp32_buffers) {
  DeviceTensor half = device_tensor(DType::BF16, {8});
  DeviceTensor full = device_tensor(DType::F32, {8});
  zt::test::check_error_mentions([&] { gpu_kernels().adamw(half, full, full, full, AdamWParams{}); },
                                 {"adamw", "param", "fp32"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
