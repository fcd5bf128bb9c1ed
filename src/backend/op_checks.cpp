// The op checks table (see op_checks.h).
#include "backend/op_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>

#include "backend/buffer.h"
#include "core/error.h"
#include "core/quant4bit.h"

namespace zt {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The tensors of one op run on one backend, made from host values (the same on every backend:
// one seed per run), and their outputs read back in fp32.
class OpRun {
 public:
  OpRun(Backend& backend, uint32_t seed) : backend_(backend), random_(seed) {}

  // Uniform values in [-scale, scale), rounded to `dtype` on the way in.
  Tensor random(DType dtype, std::initializer_list<int64_t> shape, float scale = 1.0f) {
    std::uniform_real_distribution<float> uniform(-scale, scale);
    Tensor tensor = make(dtype, shape);
    std::vector<float> host(static_cast<size_t>(tensor.numel()));
    for (float& value : host) value = uniform(random_);
    backend_.copy(tensor, Tensor(host.data(), DType::F32, {tensor.numel()}).reshaped({tensor.numel()}) );
    return tensor;
  }
  Tensor positive(DType dtype, std::initializer_list<int64_t> shape) {  // in [0.5, 1.5)
    Tensor tensor = random(dtype, shape, 0.5f);
    std::vector<float> host = read(tensor);
    for (float& value : host) value += 1.0f;
    backend_.copy(tensor, Tensor(host.data(), DType::F32, {tensor.numel()}));
    return tensor;
  }
  Tensor filled(DType dtype, std::initializer_list<int64_t> shape, float value) {
    Tensor tensor = make(dtype, shape);
    backend_.fill(tensor, value);
    return tensor;
  }
  Tensor output(DType dtype, std::initializer_list<int64_t> shape) { return filled(dtype, shape, kNaN); }
  template <class T>
  Tensor integers(DType dtype, const std::vector<T>& values) {
    Tensor tensor = make(dtype, {static_cast<int64_t>(values.size())});
    backend_.copy(tensor, Tensor(const_cast<T*>(values.data()), dtype, {static_cast<int64_t>(values.size())}));
    return tensor;
  }
  Tensor bytes(int64_t count) {  // uint8 [count], zeroed
    Tensor tensor = make(DType::U8, {count});
    std::vector<uint8_t> zeros(static_cast<size_t>(count), 0);
    backend_.copy(tensor, Tensor(zeros.data(), DType::U8, {count}));
    return tensor;
  }
  std::vector<float> read_bytes(const Tensor& tensor) {  // uint8 values as floats
    std::vector<uint8_t> host(static_cast<size_t>(tensor.numel()));
    backend_.copy(Tensor(host.data(), DType::U8, {tensor.numel()}), tensor);
    return std::vector<float>(host.begin(), host.end());
  }

  std::vector<float> read(const Tensor& tensor) {
    std::vector<float> host(static_cast<size_t>(tensor.numel()));
    backend_.copy(Tensor(host.data(), DType::F32, {tensor.numel()}), tensor.reshaped({tensor.numel()}));
    return host;
  }
  Backend& backend() { return backend_; }

 private:
  Tensor make(DType dtype, std::initializer_list<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t dim : shape) numel *= dim;
    buffers_.emplace_back(backend_, static_cast<size_t>(numel) * dtype_size(dtype));
    return Tensor(buffers_.back().data(), dtype, shape, backend_.device());
  }

  Backend& backend_;
  std::mt19937 random_;
  std::vector<Buffer> buffers_;
};

// One op: runs it on `run`'s backend in `dtype` and returns its outputs in fp32.
using Outputs = std::vector<std::vector<float>>;
struct OpCheck {
  const char* op;
  std::vector<DType> dtypes;
  double rtol;  // the fp32 bound
  std::function<Outputs(OpRun& run, DType dtype)> run;
  // Units of roundoff of a 16-bit dtype the bound allows: 2 (the inputs' and the output's),
  // more where the op rounds intermediates to the dtype: the attention (kAttentionRoundings).
  double roundings = 2.0;
};

const std::vector<DType> kFloats = {DType::F32, DType::BF16, DType::F16};
// The attention's variants round intermediates to the dtype: our tensor-core kernels P and dS
// once for every product (dQ subtracting the residue of a reference key; worst 2.9 units here on
// 2026-11-28, when P V and dS K took two parts), cuDNN's fused SDPA P and dS once for every
// product, as FlashAttention does: worst 8.3 units on the packed bf16 case on an H100
// (2026-11-27; a 5-token row leaves few terms to average the roundings out). Layout or mask
// errors are O(1), far above 12 units.
// tests/gpu/test_cuda_attention.cpp holds each variant to its own, tighter bound.
constexpr double kAttentionRoundings = 12.0;

// Sizes: rows N = B*T, channels C, vocabulary V, heads (q 4, kv 2) of dimension D.
constexpr int64_t B = 2, T = 5, N = B * T, C = 24, F = 40, V = 19, H = 4, HKV = 2, D = 16;

// Packed rows (backend.h "positions within packed rows"): row 0 holds samples of 2 and 3
// tokens, row 1 of 3 and 2.
std::vector<int32_t> packed_positions() { return {0, 1, 0, 1, 2, 0, 1, 2, 0, 1}; }

std::vector<OpCheck> op_table() {
  return {
      {"copy", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(DType::F32, {N, C});
         Tensor y = run.output(dtype, {N, C});
         run.backend().copy(y, x);
         return Outputs{run.read(y)};
       }},
      {"accumulate", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor dst = run.random(dtype, {N, C}), src = run.random(dtype, {N, C});
         run.backend().accumulate(dst, src, 0.75f);
         return Outputs{run.read(dst)};
       }},
      {"scale", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(dtype, {N, C});
         run.backend().scale(x, -1.5f);
         return Outputs{run.read(x)};
       }},
      {"clamp", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(dtype, {N, C});
         run.backend().clamp(x, -0.25f, 0.5f);
         return Outputs{run.read(x)};
       }},
      {"sum_squares", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(dtype, {N, C});
         return Outputs{{static_cast<float>(run.backend().sum_squares(x))}};
       }},
      {"matmul", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         Outputs outputs;
         for (int transposes = 0; transposes < 4; ++transposes) {
           const bool ta = transposes & 1, tb = transposes & 2;
           Tensor a = ta ? run.random(dtype, {C, N}) : run.random(dtype, {N, C});
           Tensor b = tb ? run.random(dtype, {F, C}) : run.random(dtype, {C, F});
           Tensor c = run.random(dtype, {N, F});
           run.backend().matmul(c, a, ta, b, tb, 0.5f, 0.25f);
           outputs.push_back(run.read(c));
         }
         return outputs;
       }},
      {"matmul_bias", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         Tensor a = run.random(dtype, {N, C}), w = run.random(dtype, {F, C}), bias = run.random(dtype, {F});
         Tensor c = run.output(dtype, {N, F});
         run.backend().matmul_bias(c, a, w, bias);
         return Outputs{run.read(c)};
       }},
      {"add_bias", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor y = run.random(dtype, {N, C}), bias = run.random(dtype, {C});
         run.backend().add_bias(y, bias);
         return Outputs{run.read(y)};
       }},
      {"bias_backward", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         Tensor dy = run.random(dtype, {N, C}), dbias = run.random(DType::F32, {C});
         run.backend().bias_backward(dbias, dy);
         return Outputs{run.read(dbias)};
       }},
      {"embedding", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         std::vector<int32_t> ids(N);
         for (int64_t n = 0; n < N; ++n) ids[static_cast<size_t>(n)] = static_cast<int32_t>((n * 7) % V);
         ids[3] = ids[8];  // a repeated id: the backward adds both rows
         Tensor id_tensor = run.integers(DType::I32, ids);
         Tensor table = run.random(dtype, {V, C}), out = run.output(dtype, {N, C});
         run.backend().embedding_forward(out, table, id_tensor);
         Tensor dout = run.random(dtype, {N, C}), dtable = run.random(DType::F32, {V, C});
         run.backend().embedding_backward(dtable, dout, id_tensor);
         return Outputs{run.read(out), run.read(dtable)};
       }},
      {"rmsnorm", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(dtype, {N, C}), weight = run.positive(dtype, {C});
         Tensor y = run.output(dtype, {N, C}), rstd = run.output(DType::F32, {N});
         run.backend().rmsnorm_forward(y, rstd, x, weight, 1e-5f);
         Tensor dy = run.random(dtype, {N, C}), dx = run.output(dtype, {N, C}), dweight = run.random(DType::F32, {C});
         run.backend().rmsnorm_backward(dx, GradStore::Write, dweight, dy, x, weight, rstd);
         Tensor d_residual = run.random(dtype, {N, C});  // dx += (the residual stream's gradient)
         run.backend().rmsnorm_backward(d_residual, GradStore::Add, Tensor(), dy, x, weight, rstd);
         return Outputs{run.read(y), run.read(rstd), run.read(dx), run.read(dweight), run.read(d_residual)};
       }},
      {"layernorm", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(dtype, {N, C}), weight = run.positive(dtype, {C}), bias = run.random(dtype, {C});
         Tensor y = run.output(dtype, {N, C}), mean = run.output(DType::F32, {N}), rstd = run.output(DType::F32, {N});
         run.backend().layernorm_forward(y, mean, rstd, x, weight, bias, 1e-5f);
         Tensor dy = run.random(dtype, {N, C}), dx = run.output(dtype, {N, C});
         Tensor dweight = run.random(DType::F32, {C}), dbias = run.random(DType::F32, {C});
         run.backend().layernorm_backward(dx, GradStore::Write, dweight, dbias, dy, x, weight, mean, rstd);
         Tensor d_residual = run.random(dtype, {N, C});  // dx += (the residual stream's gradient)
         run.backend().layernorm_backward(d_residual, GradStore::Add, Tensor(), Tensor(), dy, x, weight, mean, rstd);
         return Outputs{run.read(y), run.read(mean), run.read(rstd), run.read(dx), run.read(dweight), run.read(dbias),
                        run.read(d_residual)};
       }},
      {"rope", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         std::vector<float> inv_freq(D / 2);
         for (int64_t i = 0; i < D / 2; ++i)
           inv_freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(D));
         Tensor freq = run.integers(DType::F32, inv_freq);
         Tensor x = run.random(dtype, {B, T, H, D});
         run.backend().rope_forward(x, freq, Tensor());
         const std::vector<float> forward = run.read(x);
         run.backend().rope_backward(x, freq, Tensor());
         return Outputs{forward, run.read(x)};
       }},
      {"rope_packed", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         std::vector<float> inv_freq(D / 2);
         for (int64_t i = 0; i < D / 2; ++i)
           inv_freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(D));
         Tensor freq = run.integers(DType::F32, inv_freq);
         Tensor positions = run.integers(DType::I32, packed_positions());
         Tensor x = run.random(dtype, {B, T, H, D});
         run.backend().rope_forward(x, freq, positions);
         const std::vector<float> forward = run.read(x);
         run.backend().rope_backward(x, freq, positions);
         return Outputs{forward, run.read(x)};
       }},
      {"swiglu", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         Tensor gate = run.random(dtype, {N, F}, 3.0f), up = run.random(dtype, {N, F}), h = run.output(dtype, {N, F});
         run.backend().swiglu_forward(h, gate, up);
         Tensor dh = run.random(dtype, {N, F}), dgate = run.output(dtype, {N, F}), dup = run.output(dtype, {N, F});
         run.backend().swiglu_backward(dgate, dup, dh, gate, up);
         return Outputs{run.read(h), run.read(dgate), run.read(dup)};
       }},
      {"relu", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         Tensor x = run.random(dtype, {N, F}), y = run.output(dtype, {N, F});
         run.backend().relu_forward(y, x);
         Tensor dy = run.random(dtype, {N, F}), dx = run.output(dtype, {N, F});
         run.backend().relu_backward(dx, dy, y);
         return Outputs{run.read(y), run.read(dx)};
       }},
      {"attention", kFloats, 1e-4,
       [](OpRun& run, DType dtype) {
         Tensor q = run.random(dtype, {B, T, H, D}), k = run.random(dtype, {B, T, HKV, D});
         Tensor v = run.random(dtype, {B, T, HKV, D});
         Tensor out = run.output(dtype, {B, T, H, D}), lse = run.output(DType::F32, {B, H, T});
         const float scale = 1.0f / std::sqrt(static_cast<float>(D));
         run.backend().attention_forward(out, lse, q, k, v, Tensor(), scale);
         Tensor dout = run.random(dtype, {B, T, H, D}), dq = run.output(dtype, {B, T, H, D});
         Tensor dk = run.output(dtype, {B, T, HKV, D}), dv = run.output(dtype, {B, T, HKV, D});
         run.backend().attention_backward(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), scale);
         return Outputs{run.read(out), run.read(lse), run.read(dq), run.read(dk), run.read(dv)};
       },
       kAttentionRoundings},
      {"attention_packed", kFloats, 1e-4,
       [](OpRun& run, DType dtype) {
         Tensor positions = run.integers(DType::I32, packed_positions());
         Tensor q = run.random(dtype, {B, T, H, D}), k = run.random(dtype, {B, T, HKV, D});
         Tensor v = run.random(dtype, {B, T, HKV, D});
         Tensor out = run.output(dtype, {B, T, H, D}), lse = run.output(DType::F32, {B, H, T});
         const float scale = 1.0f / std::sqrt(static_cast<float>(D));
         run.backend().attention_forward(out, lse, q, k, v, positions, scale);
         Tensor dout = run.random(dtype, {B, T, H, D}), dq = run.output(dtype, {B, T, H, D});
         Tensor dk = run.output(dtype, {B, T, HKV, D}), dv = run.output(dtype, {B, T, HKV, D});
         run.backend().attention_backward(dq, dk, dv, dout, q, k, v, out, lse, positions, scale);
         return Outputs{run.read(out), run.read(lse), run.read(dq), run.read(dk), run.read(dv)};
       },
       kAttentionRoundings},
      // A generation step's attention over a cache: the 2 newest of 5 positions (offset 3).
      {"attention_cached", kFloats, 1e-4,
       [](OpRun& run, DType dtype) {
         constexpr int64_t kNew = 2;
         Tensor q = run.random(dtype, {B, kNew, H, D}), k = run.random(dtype, {B, T, HKV, D});
         Tensor v = run.random(dtype, {B, T, HKV, D}), out = run.output(dtype, {B, kNew, H, D});
         run.backend().attention_cached_forward(out, q, k, v, 1.0f / std::sqrt(static_cast<float>(D)));
         return Outputs{run.read(out)};
       }},
      {"cross_entropy", kFloats, 1e-5,
       [](OpRun& run, DType dtype) {
         std::vector<int32_t> targets(N);
         std::vector<uint8_t> mask(N, 1);
         for (int64_t n = 0; n < N; ++n) targets[static_cast<size_t>(n)] = static_cast<int32_t>((n * 5 + 1) % V);
         mask[0] = 0;
         Tensor logits = run.random(dtype, {N, V}, 4.0f);
         const double sum = run.backend().cross_entropy(logits, run.integers(DType::I32, targets),
                                                        run.integers(DType::U8, mask), 0.125f);
         return Outputs{{static_cast<float>(sum)}, run.read(logits)};
       }},
      {"dropout", kFloats, 1e-6,
       [](OpRun& run, DType dtype) {
         std::vector<int64_t> row_ids(N);
         for (int64_t n = 0; n < N; ++n) row_ids[static_cast<size_t>(n)] = 1000 + 3 * n;
         Tensor in = run.random(dtype, {N, C}), out = run.output(dtype, {N, C});
         run.backend().dropout(out, in, 0.25f, RngKey{7, 3, 2}, run.integers(DType::I64, row_ids));
         return Outputs{run.read(out)};
       }},
      {"adamw", {DType::F32}, 1e-6,
       [](OpRun& run, DType) {
         Tensor param = run.random(DType::F32, {N * C}), grad = run.random(DType::F32, {N * C});
         Tensor m = run.random(DType::F32, {N * C}, 0.1f), v = run.positive(DType::F32, {N * C});
         AdamWParams params;
         params.lr = 1e-2;
         params.weight_decay = 0.1;
         params.step = 3;
         run.backend().optimizer_kernels().adamw(param, grad, m, v, params);
         return Outputs{run.read(param), run.read(m), run.read(v)};
       }},
      {"sgd", {DType::F32}, 1e-6,
       [](OpRun& run, DType) {
         Outputs outputs;
         // Plain, first momentum step, dampened momentum with decay, Nesterov.
         const SgdParams cases[] = {{1e-2, 0.0, 0.0, 0.0, false, true},
                                    {1e-2, 0.9, 0.0, 0.0, false, true},
                                    {1e-2, 0.9, 0.25, 0.1, false, false},
                                    {1e-2, 0.9, 0.0, 0.1, true, false}};
         for (const SgdParams& params : cases) {
           Tensor param = run.random(DType::F32, {N * C}), grad = run.random(DType::F32, {N * C});
           Tensor buffer = run.random(DType::F32, {N * C}, 0.1f);
           run.backend().optimizer_kernels().sgd(param, grad, params.momentum != 0.0 ? buffer : Tensor(), params);
           outputs.push_back(run.read(param));
           outputs.push_back(run.read(buffer));
         }
         return outputs;
       }},
      {"lamb_direction", {DType::F32}, 1e-6,
       [](OpRun& run, DType) {
         Outputs outputs;
         for (const bool inside : {false, true}) {
           Tensor param = run.random(DType::F32, {N * C}), grad = run.random(DType::F32, {N * C});
           Tensor m = run.random(DType::F32, {N * C}, 0.1f), v = run.positive(DType::F32, {N * C});
           LambParams params;
           params.weight_decay = 0.01;
           params.eps_inside_sqrt = inside;
           // The update overwrites grad, as LAMB runs it.
           run.backend().optimizer_kernels().lamb_direction(grad, param, grad, m, v, params);
           outputs.push_back(run.read(grad));
           outputs.push_back(run.read(m));
           outputs.push_back(run.read(v));
         }
         return outputs;
       }},
      // 1-bit compression over a length that leaves the last byte partly used; exact zeros pack as +1.
      {"pack_signs", {DType::F32}, 0.0,
       [](OpRun& run, DType) {
         const int64_t n = N * C - 3;
         Tensor x = run.random(DType::F32, {n}), error = run.random(DType::F32, {n});
         run.backend().fill(x.rows(5, 2), 0.0f);
         Tensor bits = run.bytes((n + 7) / 8);
         run.backend().optimizer_kernels().pack_signs(bits, error, x, 0.375f);
         return Outputs{run.read_bytes(bits), run.read(error)};
       }},
      {"add_signs", {DType::F32}, 0.0,
       [](OpRun& run, DType) {
         const int64_t n = N * C - 3;
         Tensor x = run.random(DType::F32, {n}), error = run.random(DType::F32, {n}), out = run.random(DType::F32, {n});
         Tensor bits = run.bytes((n + 7) / 8);
         OptimizerKernels& kernels = run.backend().optimizer_kernels();
         kernels.pack_signs(bits, error, x, 1.0f);
         kernels.add_signs(out, bits, -0.625f);
         return Outputs{run.read(out)};
       }},
      // 0/1 Adam's synchronisation: times and divided by sqrt(v) + eps (v >= 0, some exactly 0).
      {"adam_denominator_scale", {DType::F32}, 1e-6,
       [](OpRun& run, DType) {
         const int64_t n = N * C;
         Tensor x = run.random(DType::F32, {n}), y = run.random(DType::F32, {n}), v = run.positive(DType::F32, {n});
         run.backend().fill(v.rows(0, 3), 0.0f);
         OptimizerKernels& kernels = run.backend().optimizer_kernels();
         kernels.adam_denominator_scale(x, v, 1e-3f, false);
         kernels.adam_denominator_scale(y, v, 1e-3f, true);
         return Outputs{run.read(x), run.read(y)};
       }},
      // 4-bit dequantization of an odd-length tensor with a short last block (NF4 with double
      // quantization over more than one 256-block of scales, FP4 without); bit for bit.
      {"dequantize_4bit", {DType::F32, DType::BF16, DType::F16}, 0.0,
       [](OpRun& run, DType dtype) {
         Outputs outputs;
         for (const QuantConfig config : {QuantConfig{Quant4Type::NF4, true, 64}, QuantConfig{Quant4Type::FP4, false, 64}}) {
           const int64_t n = 64 * 300 + 37;
           std::vector<float> values = run.read(run.random(DType::F32, {n}));
           for (int64_t i = 0; i < n; i += 97) values[static_cast<size_t>(i)] *= 8.0f;  // outliers set some blocks' scale
           const Quant4Layout layout = quant4_layout(n, config);
           std::vector<uint8_t> payload(layout.bytes);
           quantize_4bit(values.data(), n, config, payload.data());
           auto piece = [&](size_t offset, int64_t count, DType piece_dtype) {
             const uint8_t* begin = payload.data() + offset;
             if (piece_dtype == DType::U8) return run.integers<uint8_t>(DType::U8, std::vector<uint8_t>(begin, begin + count));
             const float* floats = reinterpret_cast<const float*>(begin);
             return run.integers<float>(DType::F32, std::vector<float>(floats, floats + count));
           };
           Quant4View view;
           view.packed = piece(layout.packed, (n + 1) / 2, DType::U8);
           view.absmax = piece(layout.absmax, layout.blocks, layout.nested ? DType::U8 : DType::F32);
           view.code = piece(layout.code, 16, DType::F32);
           if (layout.nested) {
             view.nested_absmax = piece(layout.nested_absmax, layout.nested_blocks, DType::F32);
             view.nested_code = piece(layout.nested_code, 256, DType::F32);
             view.nested_offset = piece(layout.nested_offset, 1, DType::F32);
           }
           view.blocksize = config.blocksize;
           Tensor out = run.output(dtype, {n});
           run.backend().dequantize_4bit(out, view);
           outputs.push_back(run.read(out));
         }
         return outputs;
       }},
      // ZeRO++'s block quantization (int8 weights, int4 gradients) of a length that leaves the last
      // block short and the last int4 byte half used; one block all zeros, one with an outlier;
      // bit for bit. Outputs: the codes, the scales, and the dequantized values written and added.
      {"quantize_blocks", kFloats, 0.0,
       [](OpRun& run, DType dtype) {
         Outputs outputs;
         const int64_t n = N * C - 3, block = 32;
         for (const int bits : {8, 4}) {
           Tensor in = run.random(dtype, {n}, 2.0f);
           run.backend().fill(in.rows(block, block), 0.0f);
           run.backend().fill(in.rows(3 * block + 5, 1), 40.0f);
           Tensor q = run.bytes(bits == 8 ? n : (n + 1) / 2), scales = run.output(DType::F32, {(n + block - 1) / block});
           run.backend().quantize_blocks(q, scales, in, bits, block);
           outputs.push_back(run.read_bytes(q));
           outputs.push_back(run.read(scales));
         }
         return outputs;
       }},
      {"dequantize_blocks", kFloats, 0.0,
       [](OpRun& run, DType dtype) {
         Outputs outputs;
         const int64_t n = N * C - 3, block = 32;
         for (const int bits : {8, 4}) {
           Tensor in = run.random(DType::F32, {n}, 2.0f);
           Tensor q = run.bytes(bits == 8 ? n : (n + 1) / 2), scales = run.output(DType::F32, {(n + block - 1) / block});
           run.backend().quantize_blocks(q, scales, in, bits, block);
           Tensor written = run.output(dtype, {n}), added = run.random(dtype, {n});
           run.backend().dequantize_blocks(written, q, scales, bits, block, false);
           run.backend().dequantize_blocks(added, q, scales, bits, block, true);
           outputs.push_back(run.read(written));
           outputs.push_back(run.read(added));
         }
         return outputs;
       }},
      // AdaLomo on a slice of a [N, C] matrix that cuts its first and last rows, and of a vector.
      {"adalomo_square_sums", {DType::F32}, 1e-5,
       [](OpRun& run, DType) {
         Tensor grad = run.random(DType::F32, {4 * C - 7});
         Tensor row_sums = run.output(DType::F32, {N}), col_sums = run.output(DType::F32, {C});
         Tensor vector_sums = run.output(DType::F32, {N * C});
         OptimizerKernels& kernels = run.backend().optimizer_kernels();
         kernels.adalomo_square_sums(row_sums, col_sums, grad, C + 3, 1e-3f);
         kernels.adalomo_square_sums(vector_sums, Tensor(), grad, C + 3, 1e-3f);
         return Outputs{run.read(row_sums), run.read(col_sums), run.read(vector_sums)};
       }},
      {"adalomo_moments", {DType::F32}, 1e-6,
       [](OpRun& run, DType) {
         Tensor row = run.positive(DType::F32, {N}), col = run.positive(DType::F32, {C});
         Tensor row_sums = run.positive(DType::F32, {N}), col_sums = run.positive(DType::F32, {C});
         OptimizerKernels& kernels = run.backend().optimizer_kernels();
         const double mean = kernels.adalomo_moments(row, col, row_sums, col_sums, 0.4f);
         Tensor vector = run.positive(DType::F32, {C});
         const double vector_mean = kernels.adalomo_moments(vector, Tensor(), col_sums, Tensor(), 0.25f);
         return Outputs{run.read(row), run.read(col), {static_cast<float>(mean)}, run.read(vector),
                        {static_cast<float>(vector_mean)}};
       }},
      {"adalomo_direction", {DType::F32}, 1e-6,
       [](OpRun& run, DType) {
         Tensor grad = run.random(DType::F32, {4 * C - 7}), vector_grad = run.random(DType::F32, {4 * C - 7});
         Tensor row = run.positive(DType::F32, {N}), col = run.positive(DType::F32, {C});
         Tensor vector = run.positive(DType::F32, {N * C});
         OptimizerKernels& kernels = run.backend().optimizer_kernels();
         kernels.adalomo_direction(grad, grad, row, col, C + 3, 0.8f);  // over the gradient, as AdaLomo runs it
         kernels.adalomo_direction(vector_grad, vector_grad, vector, Tensor(), C + 3, 1.0f);
         return Outputs{run.read(grad), run.read(vector_grad)};
       }},
  };
}

double dtype_rtol(DType dtype, double roundings) {
  switch (dtype) {
    case DType::BF16: return roundings * std::ldexp(1.0, -8);  // a unit of roundoff is 2^-8
    case DType::F16: return roundings * std::ldexp(1.0, -11);
    default: return 0.0;
  }
}

// The worst element of `got` against `ref` by the bound's measure, and where.
void compare(const std::vector<float>& got, const std::vector<float>& ref, size_t output, OpCheckResult& result) {
  double squares = 0.0;
  for (float value : ref) squares += static_cast<double>(value) * value;
  const double rms = ref.empty() ? 0.0 : std::sqrt(squares / static_cast<double>(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double denominator = std::fabs(ref[i]) + rms + 1e-30;
    double error = std::fabs(static_cast<double>(got[i]) - ref[i]) / denominator;
    if (std::isnan(got[i]) != std::isnan(ref[i]) || std::isinf(got[i]) != std::isinf(ref[i]))
      error = std::numeric_limits<double>::infinity();
    else if (std::isnan(ref[i]) || std::isinf(ref[i]))
      error = 0.0;
    if (error > result.worst) {
      result.worst = error;
      if (error > result.bound)
        result.detail = cat("output ", output, " element ", i, ": ", got[i], " vs reference ", ref[i]);
    }
  }
}

}  // namespace

std::vector<OpCheckResult> run_op_checks(Backend& backend, Backend& reference,
                                         const std::function<bool(const std::string&, DType)>& perturb) {
  std::vector<OpCheckResult> results;
  uint32_t seed = 1;
  for (const OpCheck& check : op_table()) {
    for (DType dtype : check.dtypes) {
      OpCheckResult result;
      result.op = check.op;
      result.dtype = dtype;
      result.bound = std::max(check.rtol, dtype_rtol(dtype, check.roundings));
      ++seed;
      try {
        OpRun expected_run(reference, seed), got_run(backend, seed);
        const Outputs expected = check.run(expected_run, dtype);
        Outputs got = check.run(got_run, dtype);
        if (perturb && perturb(check.op, dtype))
          for (std::vector<float>& values : got)
            for (float& value : values) value = value * 1.5f + 1.0f;
        for (size_t output = 0; output < expected.size(); ++output) compare(got[output], expected[output], output, result);
        result.ok = result.worst <= result.bound;
      } catch (const std::exception& error) {
        result.ok = false;
        result.detail = error.what();
      }
      results.push_back(std::move(result));
    }
  }
  return results;
}

}  // namespace zt
