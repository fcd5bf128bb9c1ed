// Benchmark: cpu_adamw (backend/cpu/cpu_adam.h, the ZeRO-Offload optimizer) on each ISA path
// this CPU runs, against this machine's memory bandwidth measured in the same run, on the same
// arrays and threads: a STREAM-like copy (a = b: 8 bytes per element) and triad (a = b + s c:
// 12 bytes), and a loop with AdamW's memory traffic and no arithmetic to speak of (4 arrays
// read, 3 of them updated in place: 28 bytes); then AdamW (28 bytes per element) and AdamW with
// the bf16 parameter copy (30 bytes) on the generic, avx2 and avx512 paths; then ZeRO-Offload's
// host step for bf16 gradients as four passes and as cpu_adamw_offload's one pass.
// Bytes are counted as STREAM counts them, without write-allocate traffic: copy and triad
// write arrays they do not read, which costs the CPU a read of each written line that is not
// counted, while AdamW (and the in-place loop) only writes lines it has just read. So the
// in-place loop is the bound AdamW is held to; copy and triad are the familiar references.
// Every measurement runs once per round, rounds interleaved (a machine shared with other work
// slows all of them alike), and the best round of each is kept. Prints GB/s and each AdamW
// path's fraction of the references; ZT_ADAM_SECONDS (the best time per step of the path
// cpu_adamw chooses, ZT_CPU_ISA or the best) is for scripts. bench/torch_adamw.py times torch's
// AdamW on the same n.
//   bench_cpu_adam [--n 67108864] [--repeats 10]     (threads: OMP_NUM_THREADS)
#include "bench_util.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_adam.h"
#include "backend/cpu/cpu_isa.h"

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

struct Arrays {
  float *p, *g, *m, *v;
  uint16_t* bf16;
  uint16_t* g_bf16;  // a bf16 gradient (16-bit gradients with offload: the host copy)
  int64_t n;
};

// One timed loop: its name, the bytes it is credited with per element, and its best time.
struct Measurement {
  std::string name;
  double bytes_per_element;
  std::function<void()> body;
  double best_seconds = 1e30;
  double rate(int64_t n) const { return bytes_per_element * static_cast<double>(n) / best_seconds / 1e9; }
};

// The bandwidth references. They write only exp_avg and leave the values in range for AdamW
// (exp_avg_sq stays >= 0, param barely moves), so they can be interleaved with its steps.
std::vector<Measurement> bandwidth_loops(const Arrays& a) {
  const int64_t n = a.n;
  float *p = a.p, *g = a.g, *m = a.m, *v = a.v;
  std::vector<Measurement> loops;
  loops.push_back({"copy  a = b", 8.0, [=] {
#pragma omp parallel for simd schedule(static)
                     for (int64_t i = 0; i < n; ++i) m[i] = g[i];
                   }});
  loops.push_back({"triad a = b + s c", 12.0, [=] {
#pragma omp parallel for simd schedule(static)
                     for (int64_t i = 0; i < n; ++i) m[i] = g[i] + 1e-3f * p[i];
                   }});
  loops.push_back({"in place 4 r + 3 w", 28.0, [=] {
#pragma omp parallel for simd schedule(static)
                     for (int64_t i = 0; i < n; ++i) {
                       p[i] += 1e-3f * g[i];
                       m[i] += g[i];
                       v[i] += g[i] * g[i];
                     }
                   }});
  return loops;
}

// AdamW on each path this CPU runs, without and with the bf16 output. Each call is a new step.
std::vector<Measurement> adamw_loops(const Arrays& a, AdamWParams& params) {
  std::vector<Measurement> loops;
  for (CpuIsa isa : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512}) {
    if (!cpu_supports(isa, cpu_features())) continue;
    const std::string name = std::string("adamw ") + cpu_isa_name(isa);
    AdamWParams* step = &params;
    loops.push_back({name, 28.0, [=] {
                       step->step += 1;
                       cpu_adamw_on(isa, a.p, a.g, a.m, a.v, a.n, *step);
                     }});
    loops.push_back({name + " + bf16", 30.0, [=] {
                       step->step += 1;
                       cpu_adamw_on(isa, a.p, a.g, a.m, a.v, a.n, *step, a.bf16);
                     }});
  }
  return loops;
}

// ZeRO-Offload's host step for bf16 gradients and bf16 compute with a divisor (loss scale x clip),
// on the path cpu_adamw chooses: as four passes (widen the gradient into fp32, divide it, AdamW,
// round the parameters to bf16: OpenMP loops as the CPU backend's copy and scale run them), and
// as the one pass of cpu_adamw_offload. Both credited with the one pass's 28 bytes per element
// (gradient 2, p, m, v 8 each, bf16 output 2: the in-place loop's bytes; credited 30 until
// 2026-11-28, which put these rows 7% high), so their rates compare as their times do.
std::vector<Measurement> offload_step_loops(const Arrays& a, AdamWParams& params) {
  std::vector<Measurement> loops;
  const int64_t n = a.n;
  const float scale = 1.0f / 1024.0f;
  AdamWParams* step = &params;
  loops.push_back({"offload step, 4 passes", 28.0, [=] {
                     step->step += 1;
#pragma omp parallel for simd schedule(static)
                     for (int64_t i = 0; i < n; ++i) a.g[i] = bf16_to_float(a.g_bf16[i]);
#pragma omp parallel for simd schedule(static)
                     for (int64_t i = 0; i < n; ++i) a.g[i] *= scale;
                     cpu_adamw(a.p, a.g, a.m, a.v, n, *step);
#pragma omp parallel for simd schedule(static)
                     for (int64_t i = 0; i < n; ++i) a.bf16[i] = float_to_bf16(a.p[i]);
                   }});
  loops.push_back({"offload step, 1 pass", 28.0, [=] {
                     step->step += 1;
                     cpu_adamw_offload(a.p, {a.g_bf16, DType::BF16, scale}, a.m, a.v, n, *step, {a.bf16, DType::BF16});
                   }});
  // fp16 mixed precision (DeepSpeed-Chat's opt-1.3b recipe): the fp32 gradient divided by the
  // loss scale, the parameters rounded to fp16 (30 bytes: gradient 4, p, m, v 8 each, fp16 out 2).
  loops.push_back({"offload step fp16, 1 pass", 30.0, [=] {
                     step->step += 1;
                     cpu_adamw_offload(a.p, {a.g, DType::F32, scale}, a.m, a.v, n, *step, {a.bf16, DType::F16});
                   }});
  return loops;
}

// One warm-up call of each, then `repeats` rounds of one call of each; keeps each one's best.
void time_rounds(std::vector<Measurement>& loops, int64_t repeats) {
  for (Measurement& loop : loops) loop.body();
  for (int64_t round = 0; round < repeats; ++round) {
    for (Measurement& loop : loops) {
      const auto start = std::chrono::steady_clock::now();
      loop.body();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      loop.best_seconds = std::min(loop.best_seconds, seconds);
    }
  }
}

void first_touch(const Arrays& a) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < a.n; ++i) {  // values of a plausible size
    a.p[i] = 0.01f * static_cast<float>(i % 1000 - 500);
    a.g[i] = 1e-4f * static_cast<float>(i % 777 - 388);
    a.m[i] = 0.0f;
    a.v[i] = 0.0f;
    a.bf16[i] = 0;
    a.g_bf16[i] = float_to_bf16(1.0f * static_cast<float>(i % 777 - 388));  // x 1/1024 below: ~g's size
  }
}

// loops: copy, triad, in place, then the AdamW paths (as main builds them).
void print_results(const std::vector<Measurement>& loops, int64_t n) {
  for (size_t i = 0; i < 3; ++i)
    std::printf("  %-24s %8.2f ms  %7.2f GB/s\n", loops[i].name.c_str(), loops[i].best_seconds * 1e3, loops[i].rate(n));
  const double copy = loops[0].rate(n), triad = loops[1].rate(n), in_place = loops[2].rate(n);
  for (size_t i = 3; i < loops.size(); ++i) {
    const Measurement& loop = loops[i];
    const double rate = loop.rate(n);
    std::printf("  %-24s %8.2f ms  %7.2f GB/s  = %.2f of in-place, %.2f of copy, %.2f of triad\n", loop.name.c_str(),
                loop.best_seconds * 1e3, rate, rate / in_place, rate / copy, rate / triad);
  }
}

int run(int argc, char** argv) {
  const int64_t n = flag(argc, argv, "--n", int64_t{1} << 26);
  const int64_t repeats = flag(argc, argv, "--repeats", 10);
  HostArray<float> param(n), grad(n), exp_avg(n), exp_avg_sq(n);
  HostArray<uint16_t> param_bf16(n), grad_bf16(n);
  const Arrays arrays{param.get(), grad.get(), exp_avg.get(), exp_avg_sq.get(), param_bf16.get(), grad_bf16.get(), n};
  first_touch(arrays);
  AdamWParams params;
  params.lr = 1e-4;
  params.weight_decay = 0.01;
  params.step = 0;  // each AdamW call is the next step
  std::vector<Measurement> loops = bandwidth_loops(arrays);  // [0, 3): copy, triad, in place
  for (Measurement& loop : adamw_loops(arrays, params)) loops.push_back(std::move(loop));
  for (Measurement& loop : offload_step_loops(arrays, params)) loops.push_back(std::move(loop));
  time_rounds(loops, repeats);

  const char* forced = std::getenv("ZT_CPU_ISA");
  std::printf("bench_cpu_adam: n %lld (%.0f MiB per fp32 array), %d threads, best of %lld interleaved rounds; "
              "cpu_adamw's path: %s (%s)\n",
              static_cast<long long>(n), 4.0 * static_cast<double>(n) / (1 << 20), omp_get_max_threads(),
              static_cast<long long>(repeats), cpu_isa_name(cpu_isa()), forced ? "ZT_CPU_ISA" : "the best of this CPU");
  print_results(loops, n);
  double separate = 0.0, fused = 0.0;
  for (const Measurement& loop : loops) {
    if (loop.name == std::string("adamw ") + cpu_isa_name(cpu_isa()))
      std::printf("ZT_ADAM_SECONDS %.6f\n", loop.best_seconds);
    if (loop.name == "offload step, 4 passes") separate = loop.best_seconds;
    if (loop.name == "offload step, 1 pass") fused = loop.best_seconds;
  }
  std::printf("offload step (bf16 gradient, divisor, bf16 parameters): 1 pass %.2f ms vs 4 passes %.2f ms = %.2fx\n",
              fused * 1e3, separate * 1e3, separate / fused);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {  // e.g. ZT_CPU_ISA names a path this CPU lacks
    std::fprintf(stderr, "bench_cpu_adam: %s\n", error.what());
    return 1;
  }
}
