// Benchmark: the measured GEMM peak of a backend, the denominator of MFU in bench/gpu_llama7b.sh.
// C[M,N] = A[M,K] B[N,K]^T (a linear layer's forward layout) through Backend::matmul, inputs
// random normal, C in the inputs' dtype (16-bit GEMMs accumulate in fp32 on both backends).
// Each repeat times `iters` GEMMs between two synchronize() calls; the best repeat counts.
// TFLOPS = 2 M N K / seconds per GEMM / 1e12.
//   bench_gemm_peak DEVICE DTYPE [--m 8192] [--n 8192] [--k 8192] [--iters 20] [--repeats 5]
//   DEVICE: cuda (GPU 0) or cpu; DTYPE: bf16, fp16 or fp32. Last line: "ZT_GEMM_TFLOPS <value>".
// The device is picked at run time (backend/make_backend.h), so the CPU dry run of the driver
// runs this same program; a build without CUDA refuses "cuda" with make_backend's message.
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "backend/make_backend.h"
#include "core/error.h"
#include "core/rng.h"

using namespace zt;

namespace {

// A [rows, cols] matrix of `dtype` on the backend's device, filled from random normal fp32
// host values (Backend::copy converts and crosses devices).
Buffer random_matrix(Backend& backend, DType dtype, int64_t rows, int64_t cols, uint32_t stream) {
  std::vector<float> host(static_cast<size_t>(rows * cols));  // [rows, cols] fp32
  const RngKey key{7, rng_stream(RngPurpose::Test, stream), 0};
  for (size_t i = 0; i < host.size(); ++i) host[i] = rng_normal(key, i);
  Buffer buffer(backend, static_cast<size_t>(rows * cols) * dtype_size(dtype));
  backend.copy(buffer.view(dtype, {rows, cols}), Tensor(host.data(), DType::F32, {rows, cols}));
  return buffer;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    ZT_CHECK(argc >= 3 && argv[1][0] != '-' && argv[2][0] != '-',
             "usage: bench_gemm_peak DEVICE DTYPE [--m 8192] [--n 8192] [--k 8192] [--iters 20] [--repeats 5]");
    const std::string device = argv[1];
    const DType dtype = parse_compute_dtype(argv[2]);
    const int64_t m = bench::flag(argc, argv, "--m", 8192), n = bench::flag(argc, argv, "--n", 8192);
    const int64_t k = bench::flag(argc, argv, "--k", 8192);
    const int64_t iters = bench::flag(argc, argv, "--iters", 20), repeats = bench::flag(argc, argv, "--repeats", 5);
    ZT_CHECK(m > 0 && n > 0 && k > 0 && iters > 0 && repeats > 0,
             "--m, --n, --k, --iters and --repeats must be positive");

    std::unique_ptr<Backend> backend = make_backend(device, 0);
    Buffer a = random_matrix(*backend, dtype, m, k, 0);  // [M, K]
    Buffer b = random_matrix(*backend, dtype, n, k, 1);  // [N, K]
    Buffer c(*backend, static_cast<size_t>(m * n) * dtype_size(dtype));  // [M, N]
    const Tensor a_view = a.view(dtype, {m, k}), b_view = b.view(dtype, {n, k}), c_view = c.view(dtype, {m, n});

    // Warm-up: library heuristics, workspace allocation, clocks ramping up.
    for (int64_t i = 0; i < iters; ++i) backend->matmul(c_view, a_view, false, b_view, true, 1.0f, 0.0f);
    backend->synchronize();
    double best_seconds = 1e30;  // per GEMM
    for (int64_t repeat = 0; repeat < repeats; ++repeat) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < iters; ++i) backend->matmul(c_view, a_view, false, b_view, true, 1.0f, 0.0f);
      backend->synchronize();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best_seconds = std::min(best_seconds, seconds / static_cast<double>(iters));
    }
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const double tflops = flops / best_seconds / 1e12;
    std::printf("bench_gemm_peak: %s %s C[%lld,%lld] = A[%lld,%lld] B[%lld,%lld]^T: best %.3f ms per GEMM "
                "(%lld repeats of %lld), %.4g TFLOPS\n",
                backend->name().c_str(), dtype_name(dtype), static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
                static_cast<long long>(k), best_seconds * 1e3, static_cast<long long>(repeats),
                static_cast<long long>(iters), tflops);
    std::printf("ZT_GEMM_TFLOPS %.3f\n", tflops);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_gemm_peak: %s\n", error.what());
    return 1;
  }
}
