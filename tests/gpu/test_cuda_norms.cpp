// GPU tests of the CUDA backend's RMSNorm and LayerNorm, forward and backward, against the CPU
// backend: every float dtype for the activations, weights in the activation dtype or fp32,
// parameter gradients accumulated into non-zero fp32 buffers, dx aliasing dy, ragged and
// LLaMA-sized rows. Bounds (fp32): y, stats 1e-5; dx 2e-5 (a row dot product in fp32 on the
// GPU, in double on the CPU); dweight/dbias 1e-5. bf16/fp16 per gpu_test_util.h.
#include <boost/test/unit_test.hpp>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

struct NormCase {
  int64_t rows, cols;
  DType dtype, weight_dtype;
};

std::vector<NormCase> norm_cases() {
  std::vector<NormCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back({37, 1003, dtype, DType::F32});
    cases.push_back({9, 4096, dtype, dtype});
  }
  cases.push_back({1, 5, DType::F32, DType::F32});
  return cases;
}

BOOST_AUTO_TEST_SUITE(cuda_norms)

BOOST_AUTO_TEST_CASE(rmsnorm_forward_and_backward) {
  uint32_t seed = 1;
  for (const NormCase& c : norm_cases()) {
    const int64_t n = c.rows * c.cols;
    const float eps = 1e-6f;
    std::vector<float> x = rounded(random_floats(n, seed++, -2.0f, 2.0f), c.dtype);
    std::vector<float> weight = rounded(random_floats(c.cols, seed++, 0.5f, 1.5f), c.weight_dtype);
    std::vector<float> dy = rounded(random_floats(n, seed++), c.dtype);
    std::vector<float> dweight = random_floats(c.cols, seed++);
    std::vector<float> y(n), rstd(c.rows), dx(n);
    cpu().rmsnorm_forward(view(y, {c.rows, c.cols}), view(rstd, {c.rows}), view(x, {c.rows, c.cols}),
                          view(weight, {c.cols}), eps);
    DeviceTensor x_d = upload(x, c.dtype, {c.rows, c.cols});
    DeviceTensor weight_d = upload(weight, c.weight_dtype, {c.cols});
    DeviceTensor y_d = poisoned(c.dtype, {c.rows, c.cols});
    DeviceTensor rstd_d = poisoned(DType::F32, {c.rows});
    gpu().rmsnorm_forward(y_d, rstd_d, x_d, weight_d, eps);
    const std::string what = cat("rmsnorm ", c.rows, "x", c.cols, " weight ", dtype_name(c.weight_dtype));
    check_near(download(y_d), y, c.dtype, 1e-5, what + " y");
    check_near(download(rstd_d), rstd, DType::F32, 1e-5, what + " rstd");

    // Backward with the CPU's rstd on both sides; dx written over dy (aliasing allowed).
    DeviceTensor dweight_d = upload(dweight, DType::F32, {c.cols});
    DeviceTensor rstd_cpu_d = upload(rstd, DType::F32, {c.rows});
    DeviceTensor dy_d = upload(dy, c.dtype, {c.rows, c.cols});
    cpu().rmsnorm_backward(view(dx, {c.rows, c.cols}), GradStore::Write, view(dweight, {c.cols}),
                           view(dy, {c.rows, c.cols}), view(x, {c.rows, c.cols}), view(weight, {c.cols}),
                           view(rstd, {c.rows}));
    gpu().rmsnorm_backward(dy_d, GradStore::Write, dweight_d, dy_d, x_d, weight_d, rstd_cpu_d);
    check_near(download(dy_d), dx, c.dtype, 2e-5, what + " dx");
    check_near(download(dweight_d), dweight, DType::F32, 1e-5, what + " dweight");

    // Frozen weight: an empty dweight is skipped, dx still written.
    DeviceTensor dx_d = poisoned(c.dtype, {c.rows, c.cols});
    DeviceTensor dy_again = upload(dy, c.dtype, {c.rows, c.cols});
    gpu().rmsnorm_backward(dx_d, GradStore::Write, Tensor(), dy_again, x_d, weight_d, rstd_cpu_d);
    check_near(download(dx_d), dx, c.dtype, 2e-5, what + " dx (frozen weight)");

    // dx += into a residual gradient (llm.c's rule), summed in fp32 and rounded once on both.
    std::vector<float> residual = rounded(random_floats(n, seed++), c.dtype), residual_cpu = residual;
    cpu().rmsnorm_backward(view(residual_cpu, {c.rows, c.cols}), GradStore::Add, Tensor(),
                           view(dy, {c.rows, c.cols}), view(x, {c.rows, c.cols}), view(weight, {c.cols}),
                           view(rstd, {c.rows}));
    DeviceTensor residual_d = upload(residual, c.dtype, {c.rows, c.cols});
    gpu().rmsnorm_backward(residual_d, GradStore::Add, Tensor(), dy_again, x_d, weight_d, rstd_cpu_d);
    check_near(download(residual_d), residual_cpu, c.dtype, 2e-5, what + " dx +=");
  }
}

BOOST_AUTO_TEST_CASE(layernorm_forward_and_backward) {
  uint32_t seed = 100;
  for (const NormCase& c : norm_cases()) {
    const int64_t n = c.rows * c.cols;
    const float eps = 1e-5f;
    // A large mean: the two-pass variance must not cancel.
    std::vector<float> x = rounded(random_floats(n, seed++, 2.0f, 4.0f), c.dtype);
    std::vector<float> weight = rounded(random_floats(c.cols, seed++, 0.5f, 1.5f), c.weight_dtype);
    std::vector<float> bias = rounded(random_floats(c.cols, seed++), c.weight_dtype);
    std::vector<float> dy = rounded(random_floats(n, seed++), c.dtype);
    std::vector<float> dweight = random_floats(c.cols, seed++), dbias = random_floats(c.cols, seed++);
    std::vector<float> y(n), mean(c.rows), rstd(c.rows), dx(n);
    cpu().layernorm_forward(view(y, {c.rows, c.cols}), view(mean, {c.rows}), view(rstd, {c.rows}),
                            view(x, {c.rows, c.cols}), view(weight, {c.cols}), view(bias, {c.cols}), eps);
    DeviceTensor x_d = upload(x, c.dtype, {c.rows, c.cols});
    DeviceTensor weight_d = upload(weight, c.weight_dtype, {c.cols});
    DeviceTensor bias_d = upload(bias, c.weight_dtype, {c.cols});
    DeviceTensor y_d = poisoned(c.dtype, {c.rows, c.cols});
    DeviceTensor mean_d = poisoned(DType::F32, {c.rows}), rstd_d = poisoned(DType::F32, {c.rows});
    gpu().layernorm_forward(y_d, mean_d, rstd_d, x_d, weight_d, bias_d, eps);
    const std::string what = cat("layernorm ", c.rows, "x", c.cols, " weight ", dtype_name(c.weight_dtype));
    check_near(download(y_d), y, c.dtype, 1e-5, what + " y");
    check_near(download(mean_d), mean, DType::F32, 1e-5, what + " mean");
    check_near(download(rstd_d), rstd, DType::F32, 1e-5, what + " rstd");

    DeviceTensor mean_cpu_d = upload(mean, DType::F32, {c.rows});
    DeviceTensor rstd_cpu_d = upload(rstd, DType::F32, {c.rows});
    DeviceTensor dy_d = upload(dy, c.dtype, {c.rows, c.cols});
    DeviceTensor dx_d = poisoned(c.dtype, {c.rows, c.cols});
    DeviceTensor dweight_d = upload(dweight, DType::F32, {c.cols});
    DeviceTensor dbias_d = upload(dbias, DType::F32, {c.cols});
    cpu().layernorm_backward(view(dx, {c.rows, c.cols}), GradStore::Write, view(dweight, {c.cols}),
                             view(dbias, {c.cols}), view(dy, {c.rows, c.cols}), view(x, {c.rows, c.cols}),
                             view(weight, {c.cols}), view(mean, {c.rows}), view(rstd, {c.rows}));
    gpu().layernorm_backward(dx_d, GradStore::Write, dweight_d, dbias_d, dy_d, x_d, weight_d, mean_cpu_d,
                             rstd_cpu_d);
    check_near(download(dx_d), dx, c.dtype, 2e-5, what + " dx");
    check_near(download(dweight_d), dweight, DType::F32, 1e-5, what + " dweight");
    check_near(download(dbias_d), dbias, DType::F32, 1e-5, what + " dbias");

    // dx += into a residual gradient, summed in fp32 and rounded once on both.
    std::vector<float> residual = rounded(random_floats(n, seed++), c.dtype), residual_cpu = residual;
    cpu().layernorm_backward(view(residual_cpu, {c.rows, c.cols}), GradStore::Add, Tensor(), Tensor(),
                             view(dy, {c.rows, c.cols}), view(x, {c.rows, c.cols}), view(weight, {c.cols}),
                             view(mean, {c.rows}), view(rstd, {c.rows}));
    DeviceTensor residual_d = upload(residual, c.dtype, {c.rows, c.cols});
    gpu().layernorm_backward(residual_d, GradStore::Add, Tensor(), Tensor(), dy_d, x_d, weight_d, mean_cpu_d,
                             rstd_cpu_d);
    check_near(download(residual_d), residual_cpu, c.dtype, 2e-5, what + " dx +=");
  }
}

BOOST_AUTO_TEST_CASE(shape_errors_name_the_argument) {
  DeviceTensor x = device_tensor(DType::F32, {4, 8});
  DeviceTensor y = device_tensor(DType::BF16, {4, 8});
  DeviceTensor weight = device_tensor(DType::F32, {7});
  DeviceTensor rstd = device_tensor(DType::F32, {4});
  zt::test::check_error_mentions([&] { gpu().rmsnorm_forward(y, rstd, x, weight, 1e-6f); },
                                 {"rmsnorm_forward", "y", "dtype"});
  DeviceTensor y32 = device_tensor(DType::F32, {4, 8});
  zt::test::check_error_mentions([&] { gpu().rmsnorm_forward(y32, rstd, x, weight, 1e-6f); },
                                 {"rmsnorm_forward", "weight", "[8]"});
  // dx += cannot run in place on dy (dx = can).
  DeviceTensor weight8 = device_tensor(DType::F32, {8});
  zt::test::check_error_mentions(
      [&] { gpu().rmsnorm_backward(y32, GradStore::Add, Tensor(), y32, x, weight8, rstd); },
      {"rmsnorm_backward", "aliases dy"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
