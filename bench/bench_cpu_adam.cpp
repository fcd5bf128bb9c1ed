// Benchmark: cpu_adamw (backend/cpu/cpu_adam.h, the ZeRO-Offload optimizer) against this machine's
// memory bandwidth. In one run, on the same arrays and threads, it measures a STREAM-like copy
// (a = b: 8 bytes per element) and triad (a = b + s c: 12 bytes), a loop with AdamW's memory
// traffic and no arithmetic to speak of (4 arrays read, 3 of them updated in place: 28 bytes),
// then AdamW (28 bytes per element) and AdamW with the bf16 parameter copy (30 bytes).
// Bytes are counted as STREAM counts them, without write-allocate traffic: copy and triad
// write arrays they do not read, which costs the CPU a read of each written line that is not
// counted, while AdamW (and the in-place loop) only writes lines it has just read. So the
// in-place loop is the bound AdamW is held to; copy and triad are the familiar references.
// Prints the best GB/s of each and AdamW's fraction of the references; ZT_ADAM_SECONDS (the
// best time per step) is for scripts. bench/torch_adamw.py times torch's AdamW on the same n.
//   bench_cpu_adam [--n 67108864] [--repeats 10]     (threads: OMP_NUM_THREADS)
#include "bench_util.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_adam.h"

using namespace zt;

namespace {

using bench::flag;

// An array that is not touched at allocation, so that the parallel first touch below places
// each thread's pages where that thread runs (what STREAM does too).
template <class T>
struct HostArray {
  std::unique_ptr<T[]> data;
  explicit HostArray(int64_t n) : data(new T[static_cast<size_t>(n)]) {}
  T* get() const { return data.get(); }
};

// Best wall time of `repeats` calls of `body` (after one warm-up call).
double best_seconds(int64_t repeats, const std::function<void()>& body) {
  body();
  double best = 1e30;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = flag(argc, argv, "--n", int64_t{1} << 26);
  const int64_t repeats = flag(argc, argv, "--repeats", 10);
  HostArray<float> param(n), grad(n), exp_avg(n), exp_avg_sq(n);
  HostArray<uint16_t> param_bf16(n);
  float *p = param.get(), *g = grad.get(), *m = exp_avg.get(), *v = exp_avg_sq.get();
  uint16_t* out = param_bf16.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // first touch, with values of a plausible size
    p[i] = 0.01f * static_cast<float>(i % 1000 - 500);
    g[i] = 1e-4f * static_cast<float>(i % 777 - 388);
    m[i] = 0.0f;
    v[i] = 0.0f;
    out[i] = 0;
  }

  // STREAM-like copy and triad over the same arrays (b = grad, c = exp_avg, a = exp_avg_sq).
  const double copy_seconds = best_seconds(repeats, [&] {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = g[i];
  });
  const double triad_seconds = best_seconds(repeats, [&] {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = g[i] + 3.0f * m[i];
  });
  // AdamW's traffic: p, m, v read and written in place, g read (values stay finite: g is small).
  const double in_place_seconds = best_seconds(repeats, [&] {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      p[i] += g[i];
      m[i] += g[i];
      v[i] += g[i];
    }
  });
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = 0.0f;
    v[i] = 0.0f;
  }

  AdamWParams params;
  params.lr = 1e-4;
  params.weight_decay = 0.01;
  const double adam_seconds = best_seconds(repeats, [&] {
    params.step += 1;
    cpu_adamw(p, g, m, v, n, params);
  });
  const double adam_bf16_seconds = best_seconds(repeats, [&] {
    params.step += 1;
    cpu_adamw(p, g, m, v, n, params, out);
  });

  const double elements = static_cast<double>(n);
  const double copy_rate = 8.0 * elements / copy_seconds / 1e9;
  const double triad_rate = 12.0 * elements / triad_seconds / 1e9;
  const double in_place_rate = 28.0 * elements / in_place_seconds / 1e9;
  const double adam_rate = 28.0 * elements / adam_seconds / 1e9;
  const double adam_bf16_rate = 30.0 * elements / adam_bf16_seconds / 1e9;
  std::printf("bench_cpu_adam: n %lld (%.0f MiB per fp32 array), %d threads, best of %lld\n",
              static_cast<long long>(n), 4.0 * elements / (1 << 20), omp_get_max_threads(),
              static_cast<long long>(repeats));
  std::printf("  copy  a = b          %8.2f ms  %7.2f GB/s\n", copy_seconds * 1e3, copy_rate);
  std::printf("  triad a = b + s c    %8.2f ms  %7.2f GB/s\n", triad_seconds * 1e3, triad_rate);
  std::printf("  in place 4 r + 3 w   %8.2f ms  %7.2f GB/s\n", in_place_seconds * 1e3, in_place_rate);
  std::printf("  cpu_adamw            %8.2f ms  %7.2f GB/s  = %.2f of in-place, %.2f of copy, %.2f of triad\n",
              adam_seconds * 1e3, adam_rate, adam_rate / in_place_rate, adam_rate / copy_rate, adam_rate / triad_rate);
  std::printf("  cpu_adamw + bf16 out %8.2f ms  %7.2f GB/s  = %.2f of in-place, %.2f of copy, %.2f of triad\n",
              adam_bf16_seconds * 1e3, adam_bf16_rate, adam_bf16_rate / in_place_rate, adam_bf16_rate / copy_rate,
              adam_bf16_rate / triad_rate);
  std::printf("ZT_ADAM_SECONDS %.6f\n", adam_seconds);
  return 0;
}
