// GPU tests of the CUDA backend's GEMM (cuBLASLt) against the CPU backend (OpenBLAS): all four
// transpose combinations, odd sizes, alpha/beta, fp32 (also TF32), bf16 and fp16 inputs with
// their own or an fp32 output, views that start at unaligned offsets, K = 0; matmul_bias (the
// bias in cuBLASLt's epilogue, or matmul + add_bias for other bias dtypes and unaligned biases)
// against the CPU's matmul + add_bias for every input/output/bias dtype.
// Bounds (see gpu_test_util.h): fp32 1e-5; TF32 below (10-bit mantissa inputs); bf16/fp16 two
// units of roundoff of the output dtype, and 1e-5 for their fp32 outputs (the inputs are the
// same rounded values, the accumulation is fp32 in both backends). TF32: typical error 5e-4
// of the rms, bound 1e-2. matmul_bias: the same bounds. The CPU rounds nothing (fp32 storage);
// the fused GPU path rounds acc + bias once, the unfused one twice (acc, then acc + bias): at
// most u |acc| + u |acc + bias| off (u: half an ulp), within 2u (|cpu| + rms) as |bias| stays
// below 2 rms here (bias values in [-1, 1], rms >= 0.5 for every shape below).
#include <boost/test/unit_test.hpp>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

struct GemmCase {
  DType input;
  DType output;
  double fp32_rtol;
};

// Runs C = alpha op(A) op(B) + beta C0 on both backends and compares.
void check_gemm(CudaBackend& backend, const GemmCase& gemm, int64_t m, int64_t n, int64_t k,
                bool transpose_a, bool transpose_b, float alpha, float beta, uint32_t seed) {
  const std::vector<float> a = rounded(random_floats(static_cast<size_t>(m * k), seed), gemm.input);
  const std::vector<float> b = rounded(random_floats(static_cast<size_t>(k * n), seed + 1), gemm.input);
  const std::vector<float> c0 = rounded(random_floats(static_cast<size_t>(m * n), seed + 2), gemm.output);
  std::vector<float> a_host = a, b_host = b, expected = c0;
  const std::initializer_list<int64_t> a_shape = {transpose_a ? k : m, transpose_a ? m : k};
  const std::initializer_list<int64_t> b_shape = {transpose_b ? n : k, transpose_b ? k : n};
  cpu().matmul(view(expected, {m, n}), view(a_host, a_shape), transpose_a, view(b_host, b_shape),
               transpose_b, alpha, beta);
  DeviceTensor a_device = upload(a, gemm.input, a_shape);
  DeviceTensor b_device = upload(b, gemm.input, b_shape);
  // beta = 0: C starts as NaN and must not leak into the result.
  DeviceTensor c_device = beta == 0.0f ? poisoned(gemm.output, {m, n}) : upload(c0, gemm.output, {m, n});
  // The operands were uploaded on gpu()'s stream and are downloaded there: another backend
  // (its own stream) must wait for the uploads, and the download for its matmul.
  gpu().synchronize();
  backend.matmul(c_device, a_device, transpose_a, b_device, transpose_b, alpha, beta);
  backend.synchronize();
  check_near(download(c_device), expected, gemm.output, gemm.fp32_rtol,
             cat("matmul ", dtype_name(gemm.input), "->", dtype_name(gemm.output), " ", m, "x", n,
                 "x", k, transpose_a ? " A^T" : " A", transpose_b ? " B^T" : " B", " beta ", beta));
}

const GemmCase kCases[] = {
    {DType::F32, DType::F32, 1e-5},  {DType::BF16, DType::BF16, 1e-5}, {DType::BF16, DType::F32, 1e-5},
    {DType::F16, DType::F16, 1e-5},  {DType::F16, DType::F32, 1e-5},
};

// Runs C = A B^T + bias on the GPU's matmul_bias and on the CPU's matmul + add_bias and
// compares; C starts as NaN. `bias_offset` elements in front of the bias make its view
// unaligned (the unfused path).
void check_matmul_bias(const GemmCase& gemm, DType bias_dtype, int64_t m, int64_t n, int64_t k,
                       int64_t bias_offset, uint32_t seed) {
  const std::vector<float> a = rounded(random_floats(static_cast<size_t>(m * k), seed), gemm.input);
  const std::vector<float> b = rounded(random_floats(static_cast<size_t>(n * k), seed + 1), gemm.input);
  const std::vector<float> bias =
      rounded(random_floats(static_cast<size_t>(bias_offset + n), seed + 2), bias_dtype);
  std::vector<float> a_host = a, b_host = b, expected(static_cast<size_t>(m * n));
  std::vector<float> bias_host(bias.begin() + bias_offset, bias.end());  // [n]
  cpu().matmul(view(expected, {m, n}), view(a_host, {m, k}), false, view(b_host, {n, k}), true,
               1.0f, 0.0f);
  cpu().add_bias(view(expected, {m, n}), view(bias_host, {n}));
  DeviceTensor a_device = upload(a, gemm.input, {m, k});
  DeviceTensor b_device = upload(b, gemm.input, {n, k});
  DeviceTensor bias_device = upload(bias, bias_dtype, {bias_offset + n});
  DeviceTensor c_device = poisoned(gemm.output, {m, n});
  gpu().matmul_bias(c_device, a_device, b_device, bias_device.tensor.rows(bias_offset, n));
  check_near(download(c_device), expected, gemm.output, gemm.fp32_rtol,
             cat("matmul_bias ", dtype_name(gemm.input), "->", dtype_name(gemm.output), " bias ",
                 dtype_name(bias_dtype), bias_offset ? " (unaligned)" : "", " ", m, "x", n, "x", k));
}

BOOST_AUTO_TEST_SUITE(cuda_gemm)

BOOST_AUTO_TEST_CASE(matmul_bias_every_dtype_and_odd_sizes) {
  uint32_t seed = 500;
  for (const GemmCase& gemm : kCases) {
    for (DType bias_dtype : float_dtypes()) {
      check_matmul_bias(gemm, bias_dtype, 37, 53, 71, 0, seed++);
      check_matmul_bias(gemm, bias_dtype, 64, 96, 128, 0, seed++);
      check_matmul_bias(gemm, bias_dtype, 1, 300, 17, 0, seed++);
      check_matmul_bias(gemm, bias_dtype, 5, 7, 3, 0, seed++);
      check_matmul_bias(gemm, bias_dtype, 33, 65, 9, 1, seed++);  // bias 2- or 4-byte aligned
    }
  }
}

BOOST_AUTO_TEST_CASE(matmul_bias_uses_each_calls_bias) {
  // The cached plan of a shape must not keep the first call's bias pointer: two live biases
  // (distinct blocks, same alignment), one shape, alternating calls.
  for (DType dtype : float_dtypes()) {
    const int64_t m = 19, n = 24, k = 40;
    std::vector<float> a = rounded(random_floats(static_cast<size_t>(m * k), 1), dtype);
    std::vector<float> b = rounded(random_floats(static_cast<size_t>(n * k), 2), dtype);
    std::vector<float> biases[2] = {rounded(random_floats(static_cast<size_t>(n), 3), dtype),
                                    rounded(random_floats(static_cast<size_t>(n), 4), dtype)};
    DeviceTensor a_device = upload(a, dtype, {m, k});
    DeviceTensor b_device = upload(b, dtype, {n, k});
    DeviceTensor bias_devices[2] = {upload(biases[0], dtype, {n}), upload(biases[1], dtype, {n})};
    for (int call : {0, 1, 0}) {
      std::vector<float> expected(static_cast<size_t>(m * n));
      cpu().matmul(view(expected, {m, n}), view(a, {m, k}), false, view(b, {n, k}), true, 1.0f, 0.0f);
      cpu().add_bias(view(expected, {m, n}), view(biases[call], {n}));
      DeviceTensor c_device = poisoned(dtype, {m, n});
      gpu().matmul_bias(c_device, a_device, b_device, bias_devices[call]);
      check_near(download(c_device), expected, dtype, 1e-5,
                 cat("matmul_bias with bias ", call, " (", dtype_name(dtype), ")"));
    }
  }
}

BOOST_AUTO_TEST_CASE(matmul_bias_edge_cases) {
  // K = 0: no products, C = the bias on every row.
  DeviceTensor a0 = device_tensor(DType::F32, {3, 0});
  DeviceTensor b0 = device_tensor(DType::F32, {4, 0});
  DeviceTensor bias = upload({1.0f, -2.0f, 0.5f, 3.0f}, DType::F32, {4});
  DeviceTensor c = poisoned(DType::F32, {3, 4});
  gpu().matmul_bias(c, a0, b0, bias);
  check_identical(download(c), {1.0f, -2.0f, 0.5f, 3.0f, 1.0f, -2.0f, 0.5f, 3.0f, 1.0f, -2.0f, 0.5f, 3.0f},
                  "matmul_bias with K = 0");
  // An empty bias: the plain product.
  DeviceTensor a = upload({1.0f, 2.0f, 3.0f, 4.0f}, DType::F32, {2, 2});
  DeviceTensor b = upload({1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}, DType::F32, {3, 2});
  DeviceTensor plain = poisoned(DType::F32, {2, 3});
  gpu().matmul_bias(plain, a, b, Tensor{});
  check_identical(download(plain), {1.0f, 2.0f, 3.0f, 3.0f, 4.0f, 7.0f}, "matmul_bias without a bias");
  // A bias of the wrong length, a bias in host memory, an integer bias.
  DeviceTensor long_bias = device_tensor(DType::F32, {4});
  zt::test::check_error_mentions([&] { gpu().matmul_bias(plain, a, b, long_bias); },
                                 {"matmul_bias", "bias"});
  std::vector<float> host_bias(3, 0.0f);
  zt::test::check_error_mentions([&] { gpu().matmul_bias(plain, a, b, view(host_bias, {3})); },
                                 {"matmul_bias", "bias", "device memory"});
  DeviceTensor int_bias = device_tensor(DType::I32, {3});
  zt::test::check_error_mentions([&] { gpu().matmul_bias(plain, a, b, int_bias); },
                                 {"matmul_bias", "bias", "fp32, bf16 or fp16"});
}

BOOST_AUTO_TEST_CASE(all_transposes_dtypes_and_odd_sizes) {
  uint32_t seed = 100;
  for (const GemmCase& gemm : kCases) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      const bool transpose_a = transposes & 1, transpose_b = transposes & 2;
      check_gemm(gpu(), gemm, 37, 53, 71, transpose_a, transpose_b, 1.0f, 0.0f, seed++);
      check_gemm(gpu(), gemm, 64, 96, 128, transpose_a, transpose_b, 0.5f, 1.0f, seed++);
      check_gemm(gpu(), gemm, 1, 300, 17, transpose_a, transpose_b, -2.0f, 0.25f, seed++);
    }
  }
}

// Sequence lengths that change every step: the heuristic is asked per bucket of shapes, not per
// length, the cache stays bounded, and every length still computes the right product (the
// layouts are exact; only the algorithm is shared within a bucket).
BOOST_AUTO_TEST_CASE(plans_are_shared_by_bucket_and_bounded) {
  std::unique_ptr<CudaBackend> backend = make_cuda_backend(0);
  for (int64_t tokens = 17; tokens <= 400; tokens += 3) {  // 128 lengths, like T of padded batches
    const std::vector<float> a = random_floats(static_cast<size_t>(tokens * 24), static_cast<uint32_t>(tokens));
    const std::vector<float> b = random_floats(24 * 8, 5);
    DeviceTensor a_device = upload(a, DType::F32, {tokens, 24});
    DeviceTensor b_device = upload(b, DType::F32, {8, 24});
    DeviceTensor c_device = poisoned(DType::F32, {tokens, 8});
    gpu().synchronize();
    backend->matmul(c_device, a_device, false, b_device, true, 1.0f, 0.0f);  // forward: M = tokens
    backend->synchronize();
    if (tokens % 51 == 17) {  // a few exact checks against the CPU
      std::vector<float> expected(static_cast<size_t>(tokens * 8)), a_host = a, b_host = b;
      cpu().matmul(view(expected, {tokens, 8}), view(a_host, {tokens, 24}), false, view(b_host, {8, 24}), true, 1.0f,
                   0.0f);
      check_near(download(c_device), expected, DType::F32, 1e-5, cat("bucketed plan, M = ", tokens));
    }
  }
  // 17..400 spans about 4.6 octaves: at most 4 buckets each.
  BOOST_TEST(backend->gemm_heuristic_queries() <= 20u);
  BOOST_TEST(backend->gemm_heuristic_queries() >= 10u);
  // The bound: 300 shapes of their own (N varies, distinct buckets) keep at most 256 plans.
  std::vector<float> one(1 * 4, 1.0f);
  DeviceTensor a_device = upload(one, DType::F32, {1, 4});
  for (int64_t n = 1; n <= 300; ++n) {
    std::vector<float> w(static_cast<size_t>(n * 4), 1.0f);
    DeviceTensor w_device = upload(w, DType::F32, {n, 4});
    DeviceTensor c_device = poisoned(DType::F32, {1, n});
    gpu().synchronize();
    backend->matmul(c_device, a_device, false, w_device, true, 1.0f, 0.0f);
  }
  backend->synchronize();
  BOOST_TEST(backend->gemm_plans_cached() <= 256u);
}

BOOST_AUTO_TEST_CASE(tf32_when_allowed) {
  CudaBackendOptions options;
  options.allow_tf32 = true;
  std::unique_ptr<CudaBackend> tf32 = make_cuda_backend(0, options);
  const GemmCase gemm{DType::F32, DType::F32, 1e-2};
  for (int transposes = 0; transposes < 4; ++transposes) {
    check_gemm(*tf32, gemm, 130, 70, 257, transposes & 1, transposes & 2, 1.0f, 0.0f, 7);
  }
}

BOOST_AUTO_TEST_CASE(unaligned_views) {
  // Rows of a larger matrix starting one row in: pointers 2- or 4-byte aligned only.
  for (DType dtype : float_dtypes()) {
    const int64_t m = 9, n = 11, k = 13;
    const std::vector<float> a = rounded(random_floats(static_cast<size_t>((m + 1) * k), 5), dtype);
    const std::vector<float> b = rounded(random_floats(static_cast<size_t>((k + 1) * n), 6), dtype);
    std::vector<float> a_rows(a.begin() + k, a.end()), b_rows(b.begin() + n, b.end());
    std::vector<float> expected(static_cast<size_t>(m * n));
    cpu().matmul(view(expected, {m, n}), view(a_rows, {m, k}), false, view(b_rows, {k, n}), false,
                 1.0f, 0.0f);
    DeviceTensor a_device = upload(a, dtype, {m + 1, k});
    DeviceTensor b_device = upload(b, dtype, {k + 1, n});
    DeviceTensor c_whole = poisoned(dtype, {m + 1, n});
    const Tensor c_view = c_whole.tensor.rows(1, m);
    gpu().matmul(c_view, a_device.tensor.rows(1, m), false, b_device.tensor.rows(1, k), false,
                 1.0f, 0.0f);
    std::vector<float> whole = download(c_whole);
    std::vector<float> result(whole.begin() + n, whole.end());
    check_near(result, expected, dtype, 1e-5, "matmul of row-offset views");
    for (int64_t j = 0; j < n; ++j) BOOST_TEST(std::isnan(whole[static_cast<size_t>(j)]));  // row 0 untouched
  }
}

BOOST_AUTO_TEST_CASE(empty_inner_dimension_scales_c) {
  DeviceTensor a = device_tensor(DType::F32, {4, 0});
  DeviceTensor b = device_tensor(DType::F32, {0, 3});
  DeviceTensor c = upload(std::vector<float>(12, 2.0f), DType::F32, {4, 3});
  gpu().matmul(c, a, false, b, false, 1.0f, 0.5f);
  check_identical(download(c), std::vector<float>(12, 1.0f), "K = 0, beta 0.5");
}

BOOST_AUTO_TEST_CASE(shape_and_dtype_errors) {
  DeviceTensor a = device_tensor(DType::BF16, {4, 5});
  DeviceTensor b = device_tensor(DType::BF16, {6, 3});
  DeviceTensor c = device_tensor(DType::BF16, {4, 3});
  zt::test::check_error([&] { gpu().matmul(c, a, false, b, false, 1.0f, 0.0f); }, "shapes do not agree");
  DeviceTensor b32 = device_tensor(DType::F32, {5, 3});
  zt::test::check_error([&] { gpu().matmul(c, a, false, b32, false, 1.0f, 0.0f); }, "must have the dtype of");
  DeviceTensor c16 = device_tensor(DType::F16, {4, 3});
  DeviceTensor b16 = device_tensor(DType::BF16, {5, 3});
  zt::test::check_error([&] { gpu().matmul(c16, a, false, b16, false, 1.0f, 0.0f); }, "or be fp32");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
