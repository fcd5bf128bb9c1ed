// Benchmark: every hot kernel of a training step, one command, in llm.c's dev/cuda manner:
// each table entry is one kernel (or one version of it), checked against the CPU backend on
// small inputs (the op-checks table, backend/op_checks.h, once per version), then timed at a
// model's shapes, with its FLOPs and bytes, so that the first run on a GPU measures them all.
//   bench_kernels DEVICE [--shape 7b|tiny] [--dtype bf16|fp16|fp32] [--iters 10] [--repeats 3]
//                 [--peak-tflops X] [--peak-gbps Y]
//   DEVICE: cuda (GPU 0) or cpu. --shape 7b: llama-2-7b (B 1, T 2048, C 4096, F 11008, 32 heads
//   of 128, vocabulary 32000); tiny: a shape the emulated device runs in seconds.
// Output: the op checks (op, dtype, worst error / bound, ok), then one row per kernel version:
// milliseconds per call (best repeat), TFLOP/s, GB/s and, with the peaks given, the fraction
// of the roofline (the larger of FLOPs / peak and bytes / bandwidth, over the measured time).
// Exit status 1 when an op check fails. Versions (ZT_CUDA_ATTENTION): the attention on cuDNN's
// fused SDPA (cudnn), on our tensor-core kernels (tensor-cores: bf16/fp16, D % 16 == 0) and on
// our CUDA-core kernels (cuda-cores).
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "backend/make_backend.h"
#include "backend/op_checks.h"
#include "core/error.h"
#include "core/rng.h"

using namespace zt;

namespace {

struct Shape {
  int64_t batch, time, channels, ffn, heads, kv_heads, head_dim, vocab;
  int64_t rows() const { return batch * time; }
};

// A buffer of `dtype` [numel] on the backend, random normal * scale (positive: |x| + 0.5).
Buffer random_buffer(Backend& backend, DType dtype, int64_t numel, uint32_t stream,
                     float scale = 1.0f, bool positive = false) {
  std::vector<float> host(static_cast<size_t>(numel));  // [numel] fp32
  const RngKey key{11, rng_stream(RngPurpose::Test, stream), 0};
  for (size_t i = 0; i < host.size(); ++i) {
    const float value = rng_normal(key, i) * scale;
    host[i] = positive ? std::fabs(value) + 0.5f : value;
  }
  Buffer buffer(backend, static_cast<size_t>(numel) * dtype_size(dtype));
  backend.copy(buffer.view(dtype, {numel}), Tensor(host.data(), DType::F32, {numel}));
  return buffer;
}

struct Kernel {
  std::string name;
  std::string version;   // "" or the value of ZT_CUDA_ATTENTION it needs
  double flops;          // per call
  double bytes;          // moved to or from device memory per call (the kernel's minimum)
  std::function<void()> call;
};

// Seconds per call: `iters` calls between two synchronize() calls, best of `repeats`.
double time_kernel(Backend& backend, const Kernel& kernel, int iters, int repeats) {
  kernel.call();  // warm-up (allocator, shared-memory opt-in)
  backend.synchronize();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) kernel.call();
    backend.synchronize();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    best = std::min(best, seconds.count() / iters);
  }
  return best;
}

void set_version(const std::string& version) {
  if (version.empty()) {
    unsetenv("ZT_CUDA_ATTENTION");
  } else {
    setenv("ZT_CUDA_ATTENTION", version.c_str(), 1);
  }
}

std::string flag_text(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return argv[i + 1];
  return fallback;
}

double flag_double(int argc, char** argv, const char* name) {
  const std::string text = flag_text(argc, argv, name, "0");
  return std::atof(text.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    ZT_CHECK(argc >= 2, "usage: bench_kernels cuda|cpu [--shape 7b|tiny] [--dtype bf16|fp16|fp32] "
                        "[--iters N] [--repeats N] [--peak-tflops X] [--peak-gbps Y]");
    const std::string device = argv[1];
    const std::string shape_name = flag_text(argc, argv, "--shape", "7b");
    const std::string dtype_text = flag_text(argc, argv, "--dtype", "bf16");
    const int iters = static_cast<int>(bench::flag(argc, argv, "--iters", 10));
    const int repeats = static_cast<int>(bench::flag(argc, argv, "--repeats", 3));
    const double peak_tflops = flag_double(argc, argv, "--peak-tflops");
    const double peak_gbps = flag_double(argc, argv, "--peak-gbps");
    ZT_CHECK(shape_name == "7b" || shape_name == "tiny", "--shape must be 7b or tiny, got ", shape_name);
    const DType dtype = parse_compute_dtype(dtype_text);
    const Shape s = shape_name == "7b" ? Shape{1, 2048, 4096, 11008, 32, 32, 128, 32000}
                                       : Shape{1, 96, 64, 128, 4, 2, 64, 100};
    std::unique_ptr<Backend> backend = make_backend(device, 0);
    std::unique_ptr<Backend> cpu = make_backend("cpu", 0);
    // The attention's variants (src/backend/cuda/cuda_attention.cu), each named so that what ran
    // is what the row says (cudnn insists: an error where cuDNN cannot run the case).
    const std::vector<std::string> versions =
        device == "cuda" ? std::vector<std::string>{"cudnn", "tensor-cores", "cuda-cores"}
                         : std::vector<std::string>{""};

    // 1. Correctness: the op checks against the CPU, for each version.
    bool all_ok = true;
    std::printf("%-22s %-6s %-12s %12s %10s %s\n", "op check", "dtype", "version", "worst", "bound", "ok");
    for (const std::string& version : versions) {
      set_version(version);
      for (const OpCheckResult& result : run_op_checks(*backend, *cpu)) {
        if (!version.empty() && result.op.rfind("attention", 0) != 0) continue;  // only the attention has versions
        if (version == "cudnn" && result.dtype == DType::F32) continue;  // cuDNN's SDPA: bf16/fp16 only
        all_ok = all_ok && result.ok;
        std::printf("%-22s %-6s %-12s %12.3e %10.3e %s %s\n", result.op.c_str(), dtype_name(result.dtype),
                    version.empty() ? "default" : version.c_str(), result.worst, result.bound,
                    result.ok ? "ok" : "FAILED", result.detail.c_str());
      }
    }

    // 2. Timing at the model's shapes.
    const int64_t n = s.rows(), c = s.channels, f = s.ffn, v = s.vocab;
    const int64_t q_numel = n * s.heads * s.head_dim, kv_numel = n * s.kv_heads * s.head_dim;
    const double e = static_cast<double>(dtype_size(dtype));  // bytes per element
    const double nd = static_cast<double>(n), cd = static_cast<double>(c), fd = static_cast<double>(f);
    const double vd = static_cast<double>(v), paramsd = static_cast<double>(c * f);
    Backend& b = *backend;
    Buffer x = random_buffer(b, dtype, n * c, 1), y = random_buffer(b, dtype, n * c, 2);
    Buffer w_up = random_buffer(b, dtype, f * c, 3, 0.02f), h = random_buffer(b, dtype, n * f, 4);
    Buffer norm_weight = random_buffer(b, dtype, c, 5, 1.0f, true);
    Buffer rstd = random_buffer(b, DType::F32, n, 6), dnorm_weight = random_buffer(b, DType::F32, c, 7);
    Buffer dx = random_buffer(b, dtype, n * c, 8);
    Buffer gate = random_buffer(b, dtype, n * f, 9), up = random_buffer(b, dtype, n * f, 10);
    Buffer q = random_buffer(b, dtype, q_numel, 11), k = random_buffer(b, dtype, kv_numel, 12);
    Buffer vv = random_buffer(b, dtype, kv_numel, 13), out = random_buffer(b, dtype, q_numel, 14);
    Buffer dout = random_buffer(b, dtype, q_numel, 15), dq = random_buffer(b, dtype, q_numel, 16);
    Buffer dk = random_buffer(b, dtype, kv_numel, 17), dv = random_buffer(b, dtype, kv_numel, 18);
    Buffer lse = random_buffer(b, DType::F32, s.batch * s.heads * s.time, 19);
    Buffer logits = random_buffer(b, dtype, n * v, 20);
    std::vector<int32_t> target_host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) target_host[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % v);
    Buffer targets(b, static_cast<size_t>(n) * sizeof(int32_t));
    b.copy(targets.view(DType::I32, {n}), Tensor(target_host.data(), DType::I32, {n}));
    std::vector<uint8_t> mask_host(static_cast<size_t>(n), 1);
    Buffer mask(b, static_cast<size_t>(n));
    b.copy(mask.view(DType::U8, {n}), Tensor(mask_host.data(), DType::U8, {n}));
    const int64_t params = c * f;  // the optimizer over one [F, C] weight
    Buffer param = random_buffer(b, DType::F32, params, 21), grad = random_buffer(b, DType::F32, params, 22);
    Buffer m = random_buffer(b, DType::F32, params, 23), v2 = random_buffer(b, DType::F32, params, 24, 1.0f, true);

    const auto q_shape = std::initializer_list<int64_t>{s.batch, s.time, s.heads, s.head_dim};
    const auto kv_shape = std::initializer_list<int64_t>{s.batch, s.time, s.kv_heads, s.head_dim};
    const float attention_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    // Causal attention: QK^T and PV over half the T x T scores each, 2 FLOPs per multiply-add;
    // backward recomputes QK^T and adds dV, dP, dS^T Q, dS K: 2.5x the forward (FlashAttention-2).
    const double attention_flops =
        2.0 * 2.0 * static_cast<double>(s.batch * s.heads * s.head_dim) * static_cast<double>(s.time) *
        static_cast<double>(s.time) / 2.0;
    const double qkv_bytes = 2.0 * static_cast<double>(q_numel + kv_numel) * e;
    std::vector<Kernel> kernels = {
        {"matmul [N,C]x[F,C]^T", "", 2.0 * nd * cd * fd, (nd * cd + fd * cd + nd * fd) * e,
         [&] { b.matmul(h.view(dtype, {n, f}), x.view(dtype, {n, c}), false, w_up.view(dtype, {f, c}), true, 1.0f, 0.0f); }},
        {"rmsnorm_forward", "", 0.0, 2.0 * nd * cd * e,
         [&] { b.rmsnorm_forward(y.view(dtype, {n, c}), rstd.view(DType::F32, {n}), x.view(dtype, {n, c}),
                                 norm_weight.view(dtype, {c}), 1e-5f); }},
        {"rmsnorm_backward", "", 0.0, 3.0 * nd * cd * e,
         [&] { b.rmsnorm_backward(dx.view(dtype, {n, c}), GradStore::Add, dnorm_weight.view(DType::F32, {c}), y.view(dtype, {n, c}),
                                  x.view(dtype, {n, c}), norm_weight.view(dtype, {c}), rstd.view(DType::F32, {n})); }},
        {"swiglu_forward", "", 0.0, 3.0 * nd * fd * e,
         [&] { b.swiglu_forward(h.view(dtype, {n, f}), gate.view(dtype, {n, f}), up.view(dtype, {n, f})); }},
        {"swiglu_backward", "", 0.0, 5.0 * nd * fd * e,
         [&] { b.swiglu_backward(gate.view(dtype, {n, f}), up.view(dtype, {n, f}), h.view(dtype, {n, f}),
                                 gate.view(dtype, {n, f}), up.view(dtype, {n, f})); }},
        {"cross_entropy", "", 0.0, 2.0 * nd * vd * e,
         [&] { b.cross_entropy(logits.view(dtype, {n, v}), targets.view(DType::I32, {n}), mask.view(DType::U8, {n}), 1.0f); }},
        {"adamw (fp32 state)", "", 0.0, 7.0 * 4.0 * paramsd,
         [&] {
           AdamWParams p;
           b.optimizer_kernels().adamw(param.view(DType::F32, {params}), grad.view(DType::F32, {params}),
                                       m.view(DType::F32, {params}), v2.view(DType::F32, {params}), p);
         }},
    };
    for (const std::string& version : versions) {
      kernels.push_back({"attention_forward", version, attention_flops, qkv_bytes, [&] {
                           b.attention_forward(out.view(dtype, q_shape), lse.view(DType::F32, {s.batch, s.heads, s.time}),
                                               q.view(dtype, q_shape), k.view(dtype, kv_shape), vv.view(dtype, kv_shape),
                                               Tensor(), attention_scale);
                         }});
      kernels.push_back({"attention_backward", version, 2.5 * attention_flops, 2.0 * qkv_bytes, [&] {
                           b.attention_backward(dq.view(dtype, q_shape), dk.view(dtype, kv_shape), dv.view(dtype, kv_shape),
                                                dout.view(dtype, q_shape), q.view(dtype, q_shape), k.view(dtype, kv_shape),
                                                vv.view(dtype, kv_shape), out.view(dtype, q_shape),
                                                lse.view(DType::F32, {s.batch, s.heads, s.time}), Tensor(), attention_scale);
                         }});
    }
    std::printf("\nkernels on %s, shape %s, %s (best of %d x %d calls)\n", device.c_str(), shape_name.c_str(),
                dtype_name(dtype), repeats, iters);
    std::printf("%-22s %-12s %10s %10s %10s %10s\n", "kernel", "version", "ms", "TFLOP/s", "GB/s", "roofline");
    for (const Kernel& kernel : kernels) {
      set_version(kernel.version);
      const double seconds = time_kernel(b, kernel, iters, repeats);
      const double bound = std::max(peak_tflops > 0 ? kernel.flops / (peak_tflops * 1e12) : 0.0,
                                    peak_gbps > 0 ? kernel.bytes / (peak_gbps * 1e9) : 0.0);
      char roofline[32] = "-";
      if (bound > 0) std::snprintf(roofline, sizeof roofline, "%.1f%%", 100.0 * bound / seconds);
      std::printf("%-22s %-12s %10.3f %10.2f %10.1f %10s\n", kernel.name.c_str(),
                  kernel.version.empty() ? "default" : kernel.version.c_str(), seconds * 1e3,
                  kernel.flops / seconds / 1e12, kernel.bytes / seconds / 1e9, roofline);
    }
    set_version("");
    return all_ok ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_kernels: %s\n", error.what());
    return 2;
  }
}
