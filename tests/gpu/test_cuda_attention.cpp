// GPU tests of the CUDA backend's causal grouped-query attention (tiled, online softmax)
// against the CPU backend, forward (out, lse) and backward (dq, dk, dv): GQA and MQA, T not a
// multiple of the tiles (forward: 64 rows on CUDA cores, 128-row blocks on tensor cores;
// backward: 32 on CUDA cores, 64-row blocks streaming 32-row tiles on tensor cores), several
// tiles, rows of 307 tokens (tensor_core_long_rows), D = 8 ... 128, every float
// dtype; the backward twice to check it is bitwise reproducible. Both backends' backward take
// the CPU forward's out (rounded to the dtype) and lse, so only the op under test differs.
// bf16/fp16 with D a multiple of 16 run the tensor-core kernels (D = 16, 64, 80, 96, 128 here),
// the others the CUDA-core ones (D = 2, 8, 24).
// Bounds (fp32): out, lse 1e-5; dq, dk, dv 5e-5 (sums over up to T x H/Hkv terms); bf16/fp16
// per gpu_test_util.h, twice that for dq, dk, dv on tensor cores, which round P and dS to the
// dtype before multiplying them (as FlashAttention-2 does): one more rounding in every term.
// Long rows take a per-element bound instead (check_within_magnitudes), which grows with the
// magnitudes of each gradient's terms.
// The cases about our kernels pin ZT_CUDA_ATTENTION=tensor-cores (the dispatcher's default
// takes cuDNN for bf16/fp16); the cudnn_* cases pin cudnn: cuDNN's fused SDPA (on the emulated
// device, src/emu/emu_cudnn*.cpp interpreting the frontend's composite graphs) against the CPU
// backend; cuDNN's dq, dk, dv bound is four times the single one: on a GPU it rounds P and dS
// once to the dtype for every product, as FlashAttention does (measured on an H100, 2026-11-27:
// up to 3.3x the single bound; the emulated cuDNN keeps them in fp32). Our tensor-core kernels
// alone carry the common-component cases below: cuDNN misses them by ~40x, which is why the
// models add V's bias after the attention (model/attention_bias.h, unit.attention_bias).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "backend/attention_scratch_rules.h"
#include "backend/counting_backend.h"
#include "backend/gpu_memory_rules.h"
#include "data/packing.h"
#include "gpu_test_util.h"
#include "test_util.h"

#if defined(ZT_EMULATED_DEVICE)
namespace zt_emu {
uint64_t mma_operations();    // emu/emu_device.h
uint64_t ldmatrix_phases();   // emu/emu_device.h
uint64_t async_copies();
uint64_t ldmatrix_wavefronts();
uint64_t cudnn_executions();  // emu/emu_cudnn.h
}  // namespace zt_emu
#endif

namespace {

using namespace zt;
using namespace zt::gpu_test;

struct AttentionCase {
  int64_t batch, time, heads, kv_heads, head_dim;
};

// ZT_CUDA_ATTENTION for one scope (the dispatcher reads it at every call), restored after.
class ScopedAttentionVariant {
 public:
  explicit ScopedAttentionVariant(const char* variant) {
    if (const char* old = std::getenv("ZT_CUDA_ATTENTION")) previous_ = old;
    setenv("ZT_CUDA_ATTENTION", variant, 1);
  }
  ~ScopedAttentionVariant() {
    if (previous_) setenv("ZT_CUDA_ATTENTION", previous_->c_str(), 1);
    else unsetenv("ZT_CUDA_ATTENTION");
  }
  ScopedAttentionVariant(const ScopedAttentionVariant&) = delete;
  ScopedAttentionVariant& operator=(const ScopedAttentionVariant&) = delete;

 private:
  std::optional<std::string> previous_;
};

// Sample-relative positions [B*T] of rows packed with samples of `lengths` (row by row; a row's
// remainder is padding, positions from 0 like data/packing.cpp writes them).
std::vector<int32_t> packed_positions(int64_t batch, int64_t time, const std::vector<std::vector<int>>& lengths) {
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t used = 0;
    for (int length : lengths[static_cast<size_t>(b)]) {
      for (int t = 0; t < length; ++t) positions.push_back(t);
      used += length;
    }
    for (int64_t t = 0; used + t < time; ++t) positions.push_back(static_cast<int32_t>(t));
  }
  return positions;
}

// The bound of dq, dk, dv (see the top of this file) for the variant the case pins.
double gradient_rtol(DType dtype, int64_t head_dim) {
  if (dtype == DType::F32) return 5e-5;
  const char* variant = std::getenv("ZT_CUDA_ATTENTION");
  if (variant != nullptr && std::string(variant) == "cudnn") return 4 * dtype_rtol(dtype);
  return head_dim % 16 == 0 ? 2 * dtype_rtol(dtype) : 5e-5;  // tensor cores, or CUDA cores
}

// The dtype's unit roundoff u (half an ulp of 1) and half an ulp of x: bf16 keeps 8
// significant bits, fp16 11.
double unit_roundoff(DType dtype) { return std::ldexp(1.0, dtype == DType::BF16 ? -8 : -11); }
double half_ulp(double x, DType dtype) {
  int exponent = 0;
  std::frexp(x, &exponent);  // |x| in [2^(exponent - 1), 2^exponent)
  return unit_roundoff(dtype) * std::ldexp(1.0, exponent - 1);
}

// Each element of device within bound(i) of expected; the failures counted, the worst named.
template <class Bound>
void check_within(const std::vector<float>& device, const std::vector<float>& expected, Bound bound,
                  const std::string& what) {
  BOOST_REQUIRE_EQUAL(device.size(), expected.size());
  int outside = 0;
  size_t worst = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    double excess = std::fabs(static_cast<double>(device[i]) - expected[i]) - bound(i);
    if (std::isnan(excess)) excess = std::numeric_limits<double>::infinity();
    if (excess <= 0.0) continue;
    if (outside++ == 0 || excess > worst_excess) worst = i, worst_excess = excess;
  }
  BOOST_TEST(outside == 0, what << ": " << outside << " of " << expected.size() << " elements past their bound; worst ["
                                << worst << "] " << device[worst] << " for " << expected[worst] << " (bound "
                                << bound(worst) << ")");
}

// Per element of out and of the gradients, what bounds its error, from the terms' magnitudes
// (fp64, on the CPU, from the CPU's lse and 16-bit out):
// - out, dq, dk, dv: the sum of the magnitudes of the terms that P and dS, rounded to the dtype,
//   multiply. out_i = sum_j P_ij |v_j| (a 16-bit P V, as FlashAttention-2 and cuDNN take it),
//   dv_j = sum_i P_ij |dO_i|, dk_j = scale sum_i |dS_ij| |q_i| (i over the queries of every head
//   of j's group that see key j), dq_i = scale sum_j |dS_ij| (|k_j| + max_j' |k_j'|) (the second
//   term bounds the reference key dQ's rounding residue multiplies). Rounding P and dS once
//   moves each element by at most u times this, at any T, where an rms-scaled bound
//   (check_near) does not grow with the number of terms.
// - dq_fp32, dk_fp32: dS's own fp32 error. dP - delta cancels where a key's value is the row's
//   out (a sample's first query: dS is 0 in exact arithmetic); there both backends' fp32 sums
//   leave their rounding, taken as 2^-20 (16 fp32 units) of the sums' terms, times |q| or |k|.
struct AttentionMagnitudes {
  std::vector<double> out, dq, dk, dv, dq_fp32, dk_fp32;
};
AttentionMagnitudes attention_magnitudes(const AttentionCase& c, const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const std::vector<float>& dout,
                                       const std::vector<float>& out, const std::vector<float>& lse,
                                       const std::vector<int32_t>& positions, float scale) {
  const int64_t T = c.time, H = c.heads, Hkv = c.kv_heads, D = c.head_dim, group = H / Hkv;
  const auto q_at = [&](int64_t b, int64_t t, int64_t h) { return static_cast<size_t>(((b * T + t) * H + h) * D); };
  const auto k_at = [&](int64_t b, int64_t t, int64_t h) { return static_cast<size_t>(((b * T + t) * Hkv + h) * D); };
  const auto zeros = [](size_t n) { return std::vector<double>(n); };
  AttentionMagnitudes m{zeros(q.size()), zeros(q.size()), zeros(k.size()), zeros(v.size()), zeros(q.size()), zeros(k.size())};
  std::vector<double> k_max(static_cast<size_t>(D));
  for (size_t e = 0; e < k.size(); ++e) k_max[e % D] = std::max(k_max[e % D], std::fabs(static_cast<double>(k[e])));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const int64_t start = positions.empty() ? 0 : i - positions[static_cast<size_t>(b * T + i)];
        const size_t qi = q_at(b, i, h);
        double delta = 0.0, delta_terms = 0.0;
        for (int64_t d = 0; d < D; ++d) {
          delta += static_cast<double>(dout[qi + d]) * out[qi + d];
          delta_terms += std::fabs(static_cast<double>(dout[qi + d]) * out[qi + d]);
        }
        for (int64_t j = start; j <= i; ++j) {
          const size_t kj = k_at(b, j, h / group);
          double score = 0.0, dp = 0.0, dp_terms = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            score += static_cast<double>(q[qi + d]) * k[kj + d];
            dp += static_cast<double>(dout[qi + d]) * v[kj + d];
            dp_terms += std::fabs(static_cast<double>(dout[qi + d]) * v[kj + d]);
          }
          const double p = std::exp(scale * score - lse[static_cast<size_t>((b * H + h) * T + i)]);
          const double ds = p * std::fabs(dp - delta), ds_fp32 = p * std::ldexp(dp_terms + delta_terms, -20);
          for (int64_t d = 0; d < D; ++d) {
            const double q_d = std::fabs(q[qi + d]), k_d = std::fabs(k[kj + d]) + k_max[d];
            m.out[qi + d] += p * std::fabs(v[kj + d]);
            m.dv[kj + d] += p * std::fabs(dout[qi + d]);
            m.dk[kj + d] += scale * ds * q_d;
            m.dk_fp32[kj + d] += scale * ds_fp32 * q_d;
            m.dq[qi + d] += scale * ds * k_d;
            m.dq_fp32[qi + d] += scale * ds_fp32 * k_d;
          }
        }
      }
    }
  }
  return m;
}

// The device's out or gradient within 2u of the CPU's, of its own size (the rounding to the
// dtype) and of its rounded terms' magnitudes (P and dS rounded once, with a factor 2 of
// headroom), plus dS's fp32 error (`fp32`, empty for out and dv).
void check_within_magnitudes(const std::vector<float>& device, const std::vector<float>& expected,
                             const std::vector<double>& rounded, const std::vector<double>& fp32, DType dtype,
                             const std::string& what) {
  const double u = unit_roundoff(dtype);
  check_within(
      device, expected,
      [&](size_t i) { return 2 * u * (std::fabs(expected[i]) + rounded[i]) + (fp32.empty() ? 0.0 : fp32[i]) + 1e-7; },
      what + " (" + dtype_name(dtype) + ")");
}

// The bound check_attention holds the device's out, dq, dk, dv to: check_near's (2 units of the
// dtype times the tensor's rms; gradient_rtol) for short rows, check_within_magnitudes (16-bit
// dtypes) for rows of hundreds of tokens, where an early key's dv sums hundreds of rounded
// probabilities and a late query's out averages hundreds of values to a fraction of their size.
enum class Bound { rms_scaled, per_element };

// `positions` empty: one sample per row; else packed rows (backend.h), on both backends.
void check_attention(const AttentionCase& c, DType dtype, uint32_t seed, std::vector<int32_t> positions = {},
                     Bound bound = Bound::rms_scaled) {
  const int64_t q_numel = c.batch * c.time * c.heads * c.head_dim;
  const int64_t kv_numel = c.batch * c.time * c.kv_heads * c.head_dim;
  const std::initializer_list<int64_t> q_shape = {c.batch, c.time, c.heads, c.head_dim};
  const std::initializer_list<int64_t> kv_shape = {c.batch, c.time, c.kv_heads, c.head_dim};
  const std::initializer_list<int64_t> lse_shape = {c.batch, c.heads, c.time};
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> q = rounded(random_floats(q_numel, seed, -2.0f, 2.0f), dtype);
  std::vector<float> k = rounded(random_floats(kv_numel, seed + 1, -2.0f, 2.0f), dtype);
  std::vector<float> v = rounded(random_floats(kv_numel, seed + 2), dtype);
  std::vector<float> dout = rounded(random_floats(q_numel, seed + 3), dtype);
  std::vector<float> out(q_numel), lse(c.batch * c.heads * c.time);
  const Tensor positions_h = positions.empty() ? Tensor() : view(positions, {c.batch * c.time});
  DeviceTensor positions_d;
  if (!positions.empty()) positions_d = upload_integers(positions, {c.batch * c.time});
  cpu().attention_forward(view(out, q_shape), view(lse, lse_shape), view(q, q_shape),
                          view(k, kv_shape), view(v, kv_shape), positions_h, scale);
  const std::string what = cat("attention B", c.batch, " T", c.time, " H", c.heads, " Hkv",
                               c.kv_heads, " D", c.head_dim, positions.empty() ? "" : " packed");
  std::vector<float> out_rounded = rounded(out, dtype);
  std::optional<AttentionMagnitudes> magnitudes;
  if (bound == Bound::per_element) {
    BOOST_REQUIRE(dtype != DType::F32);
    magnitudes = attention_magnitudes(c, q, k, v, dout, out_rounded, lse, positions, scale);
  }

  DeviceTensor q_d = upload(q, dtype, q_shape), k_d = upload(k, dtype, kv_shape);
  DeviceTensor v_d = upload(v, dtype, kv_shape), dout_d = upload(dout, dtype, q_shape);
  DeviceTensor out_d = poisoned(dtype, q_shape), lse_d = poisoned(DType::F32, lse_shape);
  gpu().attention_forward(out_d, lse_d, q_d, k_d, v_d, positions_d.tensor, scale);
  if (magnitudes) check_within_magnitudes(download(out_d), out, magnitudes->out, {}, dtype, what + " out");
  else check_near(download(out_d), out, dtype, 1e-5, what + " out");
  check_near(download(lse_d), lse, DType::F32, 1e-5, what + " lse");

  std::vector<float> dq(q_numel), dk(kv_numel), dv(kv_numel);
  cpu().attention_backward(view(dq, q_shape), view(dk, kv_shape), view(dv, kv_shape),
                           view(dout, q_shape), view(q, q_shape), view(k, kv_shape),
                           view(v, kv_shape), view(out_rounded, q_shape), view(lse, lse_shape),
                           positions_h, scale);
  DeviceTensor out_cpu_d = upload(out_rounded, dtype, q_shape);
  DeviceTensor lse_cpu_d = upload(lse, DType::F32, lse_shape);
  std::vector<float> previous[3];
  for (int run = 0; run < 2; ++run) {
    DeviceTensor dq_d = poisoned(dtype, q_shape), dk_d = poisoned(dtype, kv_shape);
    DeviceTensor dv_d = poisoned(dtype, kv_shape);
    gpu().attention_backward(dq_d, dk_d, dv_d, dout_d, q_d, k_d, v_d, out_cpu_d, lse_cpu_d,
                             positions_d.tensor, scale);
    std::vector<float> results[3] = {download(dq_d), download(dk_d), download(dv_d)};
    if (run == 0 && magnitudes) {
      check_within_magnitudes(results[0], dq, magnitudes->dq, magnitudes->dq_fp32, dtype, what + " dq");
      check_within_magnitudes(results[1], dk, magnitudes->dk, magnitudes->dk_fp32, dtype, what + " dk");
      check_within_magnitudes(results[2], dv, magnitudes->dv, {}, dtype, what + " dv");
    } else if (run == 0) {
      const double rtol = gradient_rtol(dtype, c.head_dim);
      check_near(results[0], dq, dtype, rtol, what + " dq");
      check_near(results[1], dk, dtype, rtol, what + " dk");
      check_near(results[2], dv, dtype, rtol, what + " dv");
    } else {
      for (int i = 0; i < 3; ++i) check_identical(results[i], previous[i], what + " rerun");
    }
    for (int i = 0; i < 3; ++i) previous[i] = std::move(results[i]);
  }
}

BOOST_AUTO_TEST_SUITE(cuda_attention)

BOOST_AUTO_TEST_CASE(gqa_with_ragged_tiles_in_every_dtype) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  const AttentionCase cases[] = {
      {2, 37, 4, 2, 16},   // GQA, T below one tile
      {1, 130, 2, 1, 64},  // MQA, 2 forward / 3 backward blocks, last one ragged
      {2, 65, 6, 3, 24},   // one row past a forward tile, D not a power of two
  };
  uint32_t seed = 1;
  for (const AttentionCase& c : cases) {
    for (DType dtype : float_dtypes()) check_attention(c, dtype, seed += 10);
  }
}

BOOST_AUTO_TEST_CASE(llama_head_dim_and_tiny_cases) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  check_attention({1, 64, 2, 2, 128}, DType::F32, 200);
  check_attention({1, 100, 4, 1, 128}, DType::BF16, 210);
  check_attention({1, 1, 1, 1, 8}, DType::F32, 220);
  check_attention({3, 2, 2, 2, 2}, DType::F16, 230);
}

// The common-value case's out: each device element within half an ulp (its own rounding) plus
// `small_error` of the exact (fp32) out. A forward whose weights sum to exactly 1 as P V takes
// them carries the common component c exactly: each weight is then off by at most about 2u of
// its own value (P's rounding, and the normaliser's), which only the values' spread multiplies
// (sum_j (w'_j - w_j) v_j = sum_j (w'_j - w_j)(v_j - m) for any m): at most u (max v - min v).
// A forward normalised by the exact sum of P leaves c times the rounding residue of that sum in
// the row (up to u c): on the values below, about 15 times the spread's bound.
void check_within_rounding(const std::vector<float>& device, const std::vector<float>& exact, DType dtype,
                           double small_error, const std::string& what) {
  check_within(
      device, exact,
      [&](size_t i) { return half_ulp(std::max(std::fabs(exact[i]), std::fabs(device[i])), dtype) + small_error; },
      what + " (" + dtype_name(dtype) + "), half an ulp + " + std::to_string(small_error) + " of the exact out");
}

// A large component common to every value row (OPT's v_proj bias) or key row (Qwen2's k_proj
// bias) under nearly uniform attention, the backward taking each backend's own forward output
// and lse (as training does). Values: delta = rowsum(dO * out) must carry the common component
// with the weights backward recomputes from lse, else dS = P (dP - delta) keeps dO . bias times
// the forward's rounding error in every term. The tensor-core forward rounds P once (as
// FlashAttention-2 does) and normalises out by the sum of the rounded values, so its weights sum
// to 1 and out misses only the small part's rounding, which check_within_rounding bounds: that
// check is what guards the forward here (with P normalised by the exact sum it fails on 66 bf16
// and 78 fp16 of the 6144 elements). The reference backward then takes the device's out, so dq,
// dk and dv check the backward only: out's own rounding to 16 bits moves delta by dO x half an
// ulp in every implementation alike, and a device element one ulp from the CPU's own rounding
// (within the bound above) would move a whole row of dq and dk by component x dO x ulp.
// Keys: a row of dS sums to zero, so dQ = dS K cancels the keys' common component; dS rounded to
// 16 bits leaves its rounding error's row sum times that component, which the tensor-core dQ
// subtracts (the row sum times a reference key; without it 2829 bf16 and 2797 fp16 of the 6144
// elements of dq fail).
// `time` rows of `head_dim` (2 rows, 4 heads); `positions` empty: one sample per row, else packed
// rows on both backends.
void check_common_component(bool in_keys, int64_t time = 48, int64_t head_dim = 16,
                            std::vector<int32_t> positions = {}) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  for (DType dtype : {DType::BF16, DType::F16}) {
    const int64_t batch = 2, heads = 4;
    const std::initializer_list<int64_t> shape = {batch, time, heads, head_dim};
    const std::initializer_list<int64_t> lse_shape = {batch, heads, time};
    const int64_t numel = batch * time * heads * head_dim;
    const float scale = 0.25f;
    const Tensor positions_h = positions.empty() ? Tensor() : view(positions, {batch * time});
    DeviceTensor positions_d;
    if (!positions.empty()) positions_d = upload_integers(positions, {batch * time});
    std::vector<float> q = rounded(random_floats(numel, 500, -0.5f, 0.5f), dtype);
    std::vector<float> k = random_floats(numel, 501, in_keys ? -0.1f : -0.5f, in_keys ? 0.1f : 0.5f);
    std::vector<float> v = random_floats(numel, 502, -0.1f, 0.1f);
    for (float& value : in_keys ? k : v) value += 3.0f;
    k = rounded(k, dtype);
    v = rounded(v, dtype);
    std::vector<float> dout = rounded(random_floats(numel, 503), dtype);
    std::vector<float> out(numel), lse(batch * heads * time);
    cpu().attention_forward(view(out, shape), view(lse, lse_shape), view(q, shape), view(k, shape),
                            view(v, shape), positions_h, scale);
    DeviceTensor q_d = upload(q, dtype, shape), k_d = upload(k, dtype, shape);
    DeviceTensor v_d = upload(v, dtype, shape), dout_d = upload(dout, dtype, shape);
    DeviceTensor out_d = poisoned(dtype, shape), lse_d = poisoned(DType::F32, lse_shape);
    gpu().attention_forward(out_d, lse_d, q_d, k_d, v_d, positions_d.tensor, scale);
    std::vector<float> device_out = download(out_d);
    const std::string what = cat("attention with a common ", in_keys ? "key" : "value",
                                 " component, own forwards");
    check_near(device_out, out, dtype, 0.0, what + " out");
    if (!in_keys) {
      const auto [low, high] = std::minmax_element(v.begin(), v.end());
      check_within_rounding(device_out, out, dtype, unit_roundoff(dtype) * (*high - *low) + 1e-6, what + " out");
    }
    // The reference backward takes the device forward's out, as the device backward does
    // (above). Keys: delta = rowsum(dO * out) from a 16-bit out leaves dO . (out - round(out))
    // times the keys' common component in each row of dQ, in every implementation alike, so an
    // out element one ulp from the CPU's own rounding moved a dQ row by component x dO x ulp: on
    // an H100 and an H200, one fp16 row (16 of 6144 elements, 2.05e-5 for 1.49e-5) when the
    // reference took the CPU's out.
    std::vector<float> dq(numel), dk(numel), dv(numel);
    cpu().attention_backward(view(dq, shape), view(dk, shape), view(dv, shape), view(dout, shape),
                             view(q, shape), view(k, shape), view(v, shape),
                             view(device_out, shape), view(lse, lse_shape), positions_h, scale);
    DeviceTensor dq_d = poisoned(dtype, shape), dk_d = poisoned(dtype, shape);
    DeviceTensor dv_d = poisoned(dtype, shape);
    gpu().attention_backward(dq_d, dk_d, dv_d, dout_d, q_d, k_d, v_d, out_d, lse_d, positions_d.tensor, scale);
    check_near(download(dq_d), dq, dtype, 4 * dtype_rtol(dtype), what + " dq");
    check_near(download(dk_d), dk, dtype, 4 * dtype_rtol(dtype), what + " dk");
    check_near(download(dv_d), dv, dtype, 4 * dtype_rtol(dtype), what + " dv");
  }
}

BOOST_AUTO_TEST_CASE(common_value_component_through_each_backends_own_forward) {
  check_common_component(false);
}

BOOST_AUTO_TEST_CASE(common_key_component_through_each_backends_own_forward) {
  check_common_component(true);
}

// The keys' case over several key tiles of packed rows at D 64: dQ's rounding residue builds up
// across tiles and samples, against one reference key per block (the mean of its first tile,
// which may hold an earlier sample's keys).
BOOST_AUTO_TEST_CASE(common_key_component_over_packed_tiles) {
  check_common_component(true, 130, 64, packed_positions(2, 130, {{70, 60}, {5, 100, 25}}));
}

// Rows of hundreds of tokens on tensor cores. The forward over three 128-query blocks: in the
// last, a warp's second row tile partly past T behind a full first one (T mod 32 = 19) and two
// warps wholly past T; packed samples that cross the blocks, where later warps skip the key
// tiles before their first row's sample. The backward over five 64-key dK/dV blocks and three
// 128-query dQ blocks, as the forward's. Its
// gradients are held to the per-element bound: an early key's dv sums 300 and more rounded
// probabilities, and the rms-scaled bound of the cases above, which does not grow with T,
// refused 1-5 elements of 39296-78592 (by up to 1.3x) here.
BOOST_AUTO_TEST_CASE(tensor_core_long_rows) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  uint32_t seed = 1000;
  for (DType dtype : {DType::BF16, DType::F16}) {
    check_attention({1, 307, 2, 1, 128}, dtype, seed += 10, {}, Bound::per_element);
    check_attention({1, 307, 2, 1, 64}, dtype, seed += 10, packed_positions(1, 307, {{100, 150, 57}}),
                    Bound::per_element);
  }
}

// The head dims of the LLaMA, Mistral, Qwen2 and OPT families on tensor cores, with GQA and a
// ragged last tile.
BOOST_AUTO_TEST_CASE(tensor_core_head_dims) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  uint32_t seed = 300;
  for (int64_t head_dim : {64, 80, 96, 128}) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      check_attention({1, 70, 4, 2, head_dim}, dtype, seed += 10);
    }
  }
}

// The other head dims the tensor-core kernels are built for, among them 112, whose forward and
// dQ warps own one row tile (16 queries) where every other head dim's own two.
BOOST_AUTO_TEST_CASE(tensor_core_other_head_dims) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  const std::pair<int64_t, DType> cases[] = {{32, DType::F16}, {48, DType::BF16}, {112, DType::BF16}, {112, DType::F16}};
  uint32_t seed = 900;
  for (const auto& [head_dim, dtype] : cases) check_attention({1, 70, 4, 2, head_dim}, dtype, seed += 10);
}

// Packed rows at the head dims whose D does not split evenly between dK/dV's two column halves
// (80: five n-tile pairs, 3 + 2) and whose query-side warps own one row tile (112), with GQA,
// over several dK/dV blocks and steps: samples that start inside query tiles, key blocks and
// warp tiles.
BOOST_AUTO_TEST_CASE(tensor_core_packed_uneven_head_dims) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  uint32_t seed = 1200;
  for (int64_t head_dim : {80, 112}) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      check_attention({1, 150, 4, 2, head_dim}, dtype, seed += 10, packed_positions(1, 150, {{45, 70, 20}}),
                      Bound::per_element);
    }
  }
}

#if defined(ZT_EMULATED_DEVICE)
// bf16/fp16 with D % 16 == 0 multiply with mma.sync on tensor cores; fp32 and D = 24 do not.
BOOST_AUTO_TEST_CASE(tensor_cores_are_used_where_they_fit) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  const auto mma_count_of = [](DType dtype, int64_t head_dim) {
    const uint64_t before = zt_emu::mma_operations();
    check_attention({1, 40, 2, 1, head_dim}, dtype, 400);
    return zt_emu::mma_operations() - before;
  };
  BOOST_TEST(mma_count_of(DType::BF16, 64) > 0u);
  BOOST_TEST(mma_count_of(DType::F16, 16) > 0u);
  BOOST_TEST(mma_count_of(DType::F32, 64) == 0u);
  BOOST_TEST(mma_count_of(DType::BF16, 24) == 0u);
}

// The emulator's counts over one tensor-core forward and one backward of `c` (bf16, random
// inputs): warp-wide mma.sync operations, ldmatrix phases (4 per ldmatrix.x4), their
// shared-memory wavefronts, and 16-byte cp.async copies.
struct KernelCounts {
  uint64_t mma, phases, wavefronts, copies;  // copies: 16-byte cp.async
};
struct AttentionCounts {
  KernelCounts forward, backward;
};
AttentionCounts count_tensor_core_attention(const AttentionCase& c, uint32_t seed) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  const auto counted = [](const auto& run, const Tensor& result) {
    const KernelCounts before{zt_emu::mma_operations(), zt_emu::ldmatrix_phases(), zt_emu::ldmatrix_wavefronts(),
                              zt_emu::async_copies()};
    run();
    download(result);  // (the launches run when the host waits)
    return KernelCounts{zt_emu::mma_operations() - before.mma, zt_emu::ldmatrix_phases() - before.phases,
                        zt_emu::ldmatrix_wavefronts() - before.wavefronts, zt_emu::async_copies() - before.copies};
  };
  const std::initializer_list<int64_t> q_shape = {c.batch, c.time, c.heads, c.head_dim};
  const std::initializer_list<int64_t> kv_shape = {c.batch, c.time, c.kv_heads, c.head_dim};
  const std::initializer_list<int64_t> lse_shape = {c.batch, c.heads, c.time};
  const int64_t q_numel = c.batch * c.time * c.heads * c.head_dim, kv_numel = q_numel / c.heads * c.kv_heads;
  DeviceTensor q = upload(random_floats(q_numel, seed), DType::BF16, q_shape);
  DeviceTensor k = upload(random_floats(kv_numel, seed + 1), DType::BF16, kv_shape);
  DeviceTensor v = upload(random_floats(kv_numel, seed + 2), DType::BF16, kv_shape);
  DeviceTensor dout = upload(random_floats(q_numel, seed + 3), DType::BF16, q_shape);
  DeviceTensor out = poisoned(DType::BF16, q_shape), lse = poisoned(DType::F32, lse_shape);
  DeviceTensor dq = poisoned(DType::BF16, q_shape), dk = poisoned(DType::BF16, kv_shape);
  DeviceTensor dv = poisoned(DType::BF16, kv_shape);
  const float scale = 0.125f;
  AttentionCounts counts;
  counts.forward = counted([&] { gpu().attention_forward(out, lse, q, k, v, Tensor(), scale); }, out);
  counts.backward = counted([&] { gpu().attention_backward(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), scale); },
                            dq);
  return counts;
}

// The tensor-core kernels' 16-bit tiles are padded (operand_ld: 8 elements a row) so that the 8
// rows of each ldmatrix phase fall in distinct banks: one shared-memory wavefront per phase, at
// every head dim, forward and backward (the emulator counts them; the roofline estimate in
// BENCHMARKS.md assumes it). An unpadded D 128 tile would take 8 per phase.
BOOST_AUTO_TEST_CASE(tensor_core_tiles_load_without_bank_conflicts) {
  uint32_t seed = 500;
  for (int64_t head_dim : {64, 80, 96, 128}) {
    const AttentionCounts counts = count_tensor_core_attention({1, 70, 2, 1, head_dim}, seed += 10);
    BOOST_TEST(counts.forward.phases > 0u, "D " << head_dim);
    BOOST_TEST(counts.forward.wavefronts == counts.forward.phases, "forward, D " << head_dim);
    BOOST_TEST(counts.backward.phases > 0u, "D " << head_dim);
    BOOST_TEST(counts.backward.wavefronts == counts.backward.phases, "backward, D " << head_dim);
  }
}

// The work the roofline estimate (BENCHMARKS.md, "Our tensor-core attention on mma.sync") counts
// per tile, counted here at D 128 on T 128, causal, one head; each mma m16n8k16 4096 FLOPs, each
// ldmatrix.x4 512 bytes.
//   forward: one block of 4 warps of 32 rows (two row tiles), 32-key tiles; warp w sees key tiles
//     0 .. w and skips the later ones: 10 warp tiles. Per warp tile of 32 queries x 32 keys: S
//     (4 n-tiles x 8 k-steps x 2 row tiles = 64 mma) and P V, P rounded once (16 n-tiles x 2
//     k-steps x 2 = 64 mma); ldmatrix.x4: K (8 k-steps x 2 n-tile pairs) and V (2 x 8), each
//     serving both row tiles, and Q's operands (8 k-steps x 2 row tiles), 48 (24 KB).
//   backward dK/dV: blocks of 64 keys stream 64-query tiles; per step, warp w computes S^T and
//     dP^T of keys 32 (w / 2) .. and queries 32 (w % 2) .. (4 n-tiles x 8 k-steps x 2 row tiles
//     each: 128 mma; ldmatrix.x4 K or V (8 x 2) and Q or dO (8 x 2), each serving both row tiles:
//     64), then P^T dO and dS^T Q for the same keys and half of D (4 n-tile pairs x 2 halves x 4
//     k-steps x 2 row tiles each: 128 mma; P^T or dS^T (4 x 2) and dO or Q (4 x 4): 48). Steps: 3
//     (keys 0-63 see 2 query tiles, keys 64-127 one); on the diagonal steps the warp of keys 32-63
//     and queries 0-31 sees nothing and skips its S^T and dP^T.
//   backward dQ, as the forward: one block of 4 warps of 32 queries (two row tiles), 32-key tiles,
//     warp w computes key tiles 0 .. w: 10 warp tiles. Per warp tile: S, dP (4 n-tiles x 8
//     k-steps x 2 row tiles each) and dS K (16 x 2 x 2) = 192 mma; ldmatrix.x4: K, V (8 k-steps x 2
//     n-tile pairs each) and K again (2 x 8), each serving both row tiles, and Q's and dO's
//     operands (8 x 2 each): 80 (40 KB), where 16-row warps loaded 64 for 96 mma.
//   cp.async: the forward's Q tile (32 KB) and its 4 K, V tile pairs (16 KB each); per backward
//     step 32 KB of Q and dO (dK/dV) or 16 KB of K and V (dQ); the backward blocks' own rows (K,
//     V; Q, dO) are plain 16-byte loads.
BOOST_AUTO_TEST_CASE(tensor_core_work_per_tile_matches_the_roofline_estimate) {
  const AttentionCounts counts = count_tensor_core_attention({1, 128, 1, 1, 128}, 600);
  constexpr uint64_t kWarps = 4, kQueryWarpTiles = 1 + 2 + 3 + 4, kDkdvSteps = 3, kDqSteps = 4;
  constexpr uint64_t kScoreWarpSteps = kDkdvSteps * kWarps - 2;  // less the diagonal's skipped two
  BOOST_TEST(counts.forward.mma == kQueryWarpTiles * (64 + 64));
  BOOST_TEST(counts.forward.phases / 4 == kQueryWarpTiles * 48);
  BOOST_TEST(counts.backward.mma == kScoreWarpSteps * 128 + kDkdvSteps * kWarps * 128 + kQueryWarpTiles * 192);
  BOOST_TEST(counts.backward.phases / 4 == kScoreWarpSteps * 64 + kDkdvSteps * kWarps * 48 + kQueryWarpTiles * 80);
  BOOST_TEST(counts.forward.copies * 16 == (32 + 4 * 16) * 1024);
  BOOST_TEST(counts.backward.copies * 16 == (kDkdvSteps * 32 + kDqSteps * 16) * 1024);
}
#endif

// Packed rows (--packing): samples that start and end inside tiles, span tile borders, fill a
// whole row, and padding after the last sample; the CPU's packed attention equals per-sample
// attention (unit.packing), so matching it is matching the unpacked computation.
BOOST_AUTO_TEST_CASE(packed_rows_in_every_dtype) {
  const ScopedAttentionVariant variant("tensor-cores");  // our kernels, not cuDNN
  const AttentionCase c = {3, 130, 4, 2, 16};
  const std::vector<int32_t> positions =
      packed_positions(c.batch, c.time, {{70, 35, 25}, {33, 64, 20}, {130}});
  uint32_t seed = 300;
  for (DType dtype : float_dtypes()) check_attention(c, dtype, seed += 10, positions);
  check_attention({2, 40, 2, 2, 64}, DType::F32, 350, packed_positions(2, 40, {{1, 1, 5, 31}, {7}}));
}

// ---- cuDNN's fused SDPA (ZT_CUDA_ATTENTION=cudnn: an error if cuDNN refuses a case) ----------

// Runs `body` with the cuDNN variant; on the emulated device also checks that cuDNN ran
// (forward and two backwards per check_attention).
template <class Body>
void with_cudnn(Body body) {
  const ScopedAttentionVariant variant("cudnn");
#if defined(ZT_EMULATED_DEVICE)
  const uint64_t before = zt_emu::cudnn_executions();
  body();
  BOOST_TEST(zt_emu::cudnn_executions() > before);
#else
  body();
#endif
}

// Causal GQA (H = 4, Hkv = 2) and MQA (Hkv = 1), T not a power of two, both 16-bit dtypes.
BOOST_AUTO_TEST_CASE(cudnn_causal_gqa_and_mqa) {
  uint32_t seed = 600;
  for (DType dtype : {DType::BF16, DType::F16}) {
    with_cudnn([&] { check_attention({2, 37, 4, 2, 64}, dtype, seed += 10); });
    with_cudnn([&] { check_attention({1, 33, 4, 1, 64}, dtype, seed += 10); });
  }
}

// The head dims of the LLaMA, Mistral, Qwen2 and OPT families.
BOOST_AUTO_TEST_CASE(cudnn_head_dims) {
  uint32_t seed = 700;
  for (int64_t head_dim : {64, 80, 96, 128}) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      with_cudnn([&] { check_attention({1, 24, 4, 2, head_dim}, dtype, seed += 10); });
    }
  }
}

// Packed rows as cuDNN's ragged sequences: several samples per row, a full row, padding after
// the last sample; sequence counts and lengths that the graph buckets round up (empty
// sequences, S = 64 over 60 tokens).
BOOST_AUTO_TEST_CASE(cudnn_packed_rows) {
  uint32_t seed = 800;
  for (DType dtype : {DType::BF16, DType::F16}) {
    with_cudnn([&] {
      check_attention({3, 40, 4, 2, 64}, dtype, seed += 10, packed_positions(3, 40, {{10, 20, 5}, {40}, {7, 13}}));
    });
    with_cudnn([&] {
      check_attention({2, 70, 4, 1, 64}, dtype, seed += 10, packed_positions(2, 70, {{30, 40}, {3, 60}}));
    });
  }
}

// Rows of 307 tokens, plain and packed, with the per-element gradient bound of
// tensor_core_long_rows (cuDNN rounds P and dS once for each product, on a GPU, as our kernels do).
BOOST_AUTO_TEST_CASE(cudnn_long_rows) {
  uint32_t seed = 1100;
  for (DType dtype : {DType::BF16, DType::F16}) {
    with_cudnn([&] { check_attention({1, 307, 2, 1, 128}, dtype, seed += 10, {}, Bound::per_element); });
    with_cudnn([&] {
      check_attention({1, 307, 2, 1, 64}, dtype, seed += 10, packed_positions(1, 307, {{100, 150, 57}}),
                      Bound::per_element);
    });
  }
}

// One row, as the models run micro-batch 1 (every call takes the packed graphs: the models pass
// each row's positions), at a length that grows and then shrinks from one call to the next: the
// packed index arrays must follow the row's length, although its only sample start (0) stays.
BOOST_AUTO_TEST_CASE(cudnn_one_row_growing_then_shrinking) {
  uint32_t seed = 850;
  for (int64_t time : {16, 17, 40, 13}) {
    with_cudnn([&] {
      check_attention({1, time, 4, 2, 64}, DType::BF16, seed += 10,
                      packed_positions(1, time, {{static_cast<int>(time)}}));
    });
  }
}

// cuDNN's packed graphs take the sample boundaries from the host copy of the uploaded positions
// (UploadMirror). Positions overwritten on the device (here by a device copy) must not be read
// from a stale host copy: the dispatcher then downloads them. Both calls must give the same bits.
BOOST_AUTO_TEST_CASE(cudnn_packed_positions_overwritten_on_the_device) {
  const ScopedAttentionVariant variant("cudnn");
  const int64_t batch = 2, time = 40, heads = 4, kv_heads = 2, head_dim = 64;
  const std::initializer_list<int64_t> q_shape = {batch, time, heads, head_dim};
  const std::initializer_list<int64_t> kv_shape = {batch, time, kv_heads, head_dim};
  const std::initializer_list<int64_t> lse_shape = {batch, heads, time};
  DeviceTensor uploaded = upload_integers(packed_positions(batch, time, {{10, 30}, {25}}), {batch * time});
  DeviceTensor overwritten = upload_integers(packed_positions(batch, time, {{40}, {5, 5, 30}}), {batch * time});
  gpu().copy(overwritten, uploaded);  // now the first layout, on the device only
  const int64_t q_numel = batch * time * heads * head_dim, kv_numel = batch * time * kv_heads * head_dim;
  DeviceTensor q = upload(random_floats(q_numel, 900), DType::BF16, q_shape);
  DeviceTensor k = upload(random_floats(kv_numel, 901), DType::BF16, kv_shape);
  DeviceTensor v = upload(random_floats(kv_numel, 902), DType::BF16, kv_shape);
  std::vector<float> results[2][2];
  const Tensor positions[2] = {uploaded, overwritten};
  for (int i = 0; i < 2; ++i) {
    DeviceTensor out = poisoned(DType::BF16, q_shape), lse = poisoned(DType::F32, lse_shape);
    gpu().attention_forward(out, lse, q, k, v, positions[i], 0.125f);
    results[i][0] = download(out);
    results[i][1] = download(lse);
  }
  check_identical(results[1][0], results[0][0], "out with positions overwritten on the device");
  check_identical(results[1][1], results[0][1], "lse with positions overwritten on the device");
}

// cuDNN's workspace comes from the backend's caching allocator and is what the memory model
// counts (backend/attention_scratch_rules.h, cuda_attention_scratch, through the counting backend): the
// device peak each call adds to what is held, by the backend's own counters, equals the counting
// backend's to the byte, dense and packed (one sample per row; and many short samples beside a
// long one, whose bucketed graph the model counts from the data's bound), at a
// length where the backward's workspace is most of it (the fp32 softmax sum and the
// deterministic engine's dS [B, H, 256, 256] in bf16: the frontend's part computed by the real
// cudnn-frontend headers, the plan's by the emulated cuDNN). On a GPU the plan's part is the
// engine's own and may differ (the check then says by how much). A fresh backend: the packed
// index arrays it keeps are then allocated by these calls, as in a fresh counting backend.
// The emulated cuDNN's plan workspace is the memory model's allowance, so there the device's
// figure equals the model's to the byte. A real engine's own workspace is unknown beforehand: on a
// GPU the model must not count less than the device holds (it is the check before the first step),
// and the message gives both figures.
static void check_counted(int64_t measured, int64_t predicted, const std::string& what) {
#if defined(ZT_EMULATED_DEVICE)
  BOOST_TEST(measured == predicted, what << ": device peak added " << measured << " B vs the memory model's "
                                         << predicted << " B");
#else
  BOOST_TEST(measured <= predicted, what << ": device peak added " << measured << " B, more than the memory model's "
                                         << predicted << " B (cuDNN's plan workspace exceeds kCudnnPlanWorkspaceAllowance)");
#endif
}

// One case of cudnn_workspace_counted on a fresh CUDA backend and a fresh counting backend (as
// the memory model makes it for that backend, train/memory_model.cpp, with `packed_rows`): the
// peak the forward and the backward each add, measured against predicted. `positions` empty:
// dense. Returns the backward's measured peak.
struct WorkspaceCase {
  std::string what;
  int64_t time = 0;                // T of the rows
  std::vector<int32_t> positions;  // [B*T] or empty
  PackedRows packed_rows;          // what the counting backend is told packed rows hold
};
constexpr int64_t kWsBatch = 2, kWsHeads = 4, kWsKvHeads = 2, kWsHeadDim = 64;

int64_t check_workspace_case(const WorkspaceCase& c) {
  const int64_t time = c.time;
  const std::initializer_list<int64_t> q_shape = {kWsBatch, time, kWsHeads, kWsHeadDim};
  const std::initializer_list<int64_t> kv_shape = {kWsBatch, time, kWsKvHeads, kWsHeadDim};
  const std::initializer_list<int64_t> lse_shape = {kWsBatch, kWsHeads, time};
  std::unique_ptr<CudaBackend> backend = make_cuda_backend(0);
  std::vector<Buffer> buffers;
  auto tensor = [&](DType dtype, std::initializer_list<int64_t> shape, uint32_t seed) {
    const Tensor probe(nullptr, dtype, shape, Device::CUDA);
    buffers.emplace_back(*backend, probe.bytes());
    const Tensor result(buffers.back().data(), dtype, shape, Device::CUDA);
    std::vector<float> values = random_floats(probe.numel(), seed);
    backend->copy(result, view(values, shape));
    return result;
  };
  const Tensor q = tensor(DType::BF16, q_shape, 1), k = tensor(DType::BF16, kv_shape, 2);
  const Tensor v = tensor(DType::BF16, kv_shape, 3), dout = tensor(DType::BF16, q_shape, 4);
  const Tensor out = tensor(DType::BF16, q_shape, 5), lse = tensor(DType::F32, lse_shape, 6);
  const Tensor dq = tensor(DType::BF16, q_shape, 7), dk = tensor(DType::BF16, kv_shape, 8);
  const Tensor dv = tensor(DType::BF16, kv_shape, 9);
  Tensor positions;
  if (!c.positions.empty()) {
    std::vector<int32_t> values = c.positions;  // [B*T]
    buffers.emplace_back(*backend, values.size() * sizeof(int32_t));
    positions = Tensor(buffers.back().data(), DType::I32, {kWsBatch * time}, Device::CUDA);
    backend->copy(positions, view(values, {kWsBatch * time}));
  }
  auto counting_backend = [&](PackedRows packed_rows) {
    CountingOptions options;
    options.allocation_size = backend->memory_traits().allocation_size;
    options.attention_scratch = cuda_attention_scratch;
    options.packed_rows = packed_rows;
    return make_counting_backend(options);
  };
  std::unique_ptr<CountingBackend> counting = counting_backend(c.packed_rows);
  // The peak `call` adds to what `on` holds: the CUDA backend's counters (its caching allocator's
  // blocks in use), or the counting backend's.
  auto measured = [&](auto call) {
    backend->synchronize();
    backend->reset_memory_peak();
    const int64_t before = backend->memory()->in_use;
    call(static_cast<Backend&>(*backend));
    backend->synchronize();
    return backend->memory()->peak - before;
  };
  auto predicted = [&](CountingBackend& on, auto call) {
    on.reset_peaks();
    const int64_t before = on.counted().device;
    call(static_cast<Backend&>(on));
    return on.counted().device_peak - before;
  };
  auto forward = [&](Backend& on) { on.attention_forward(out, lse, q, k, v, positions, 0.125f); };
  auto backward = [&](Backend& on) { on.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, positions, 0.125f); };
#if defined(ZT_EMULATED_DEVICE)
  const uint64_t before = zt_emu::cudnn_executions();
#endif
  const int64_t forward_measured = measured(forward), backward_measured = measured(backward);
#if defined(ZT_EMULATED_DEVICE)
  BOOST_TEST(zt_emu::cudnn_executions() == before + 2, c.what << ": cuDNN ran both");
#endif
  check_counted(forward_measured, predicted(*counting, forward), c.what + " forward");
  check_counted(backward_measured, predicted(*counting, backward), c.what + " backward");
  BOOST_TEST(counting->counted().device_terms_at_peak.at(kTermAttentionWorkspace) > 0);
#if defined(ZT_EMULATED_DEVICE)  // a real engine's dS is its own (a GPU bounds the prediction, check_counted)
  if (c.packed_rows.samples > 0) {  // one sample per row (what the model counted before): short by dS
    std::unique_ptr<CountingBackend> one_per_row = counting_backend({});
    predicted(*one_per_row, forward);  // its index arrays, as the counted backend's
    BOOST_TEST(predicted(*one_per_row, backward) < backward_measured, c.what << ": one sample per row undercounts");
  }
#endif
  return backward_measured;
}

BOOST_AUTO_TEST_CASE(cudnn_workspace_counted) {
  const ScopedAttentionVariant variant("cudnn");
  const int64_t time = 200;
  const int row = static_cast<int>(time);
  // Many short samples beside one as long as the row (--packing's rows, data/packing.h): 8 samples
  // of 10..100 tokens pack into 2 rows, [100] and [10 x 7 + 30 padding], so cuDNN's ragged graph
  // has 9 sequences, bucketed to B' = 2 x 8 = 16 of S' = 100: eight times the one-sample-per-row
  // count (dS [16, H, 128, 128] bf16, twice the plan's allowance). The memory model knows only the
  // data's bound (packed_rows_bound), which must give it.
  const int64_t short_time = 100;
  const std::vector<int64_t> lengths = {10, 10, 10, 100, 10, 10, 10, 10};  // [8] one micro-batch's samples
  std::vector<std::vector<int>> rows;
  for (const std::vector<size_t>& packed_row : pack_first_fit_decreasing(lengths, short_time)) {
    rows.emplace_back();
    for (size_t sample : packed_row) rows.back().push_back(static_cast<int>(lengths[sample]));
  }
  BOOST_TEST_REQUIRE(rows.size() == size_t{kWsBatch});
  const PackedRows data_bound = packed_rows_bound(static_cast<int64_t>(lengths.size()), 10, short_time);
  BOOST_TEST(worst_ragged_batch(data_bound, kWsBatch) == 16);
  const int64_t dense_backward = check_workspace_case({"dense", time, {}, {}});
  check_workspace_case({"packed", time, packed_positions(kWsBatch, time, {{row}, {row}}), {}});
  check_workspace_case({"packed, 7 short samples + 1 long", short_time,
                        packed_positions(kWsBatch, short_time, rows), data_bound});
  // The dense backward's whole addition is the graph's workspace, one block of the allocator:
  // the frontend's fp32 softmax sum [B, H, T] and the deterministic plan's dS, 1 MiB here.
  const SdpaGraphShape graph{kWsBatch, kWsHeads, kWsKvHeads, time, kWsHeadDim, false};
  const int64_t workspace = cudnn_sdpa_frontend_workspace_bytes(graph, true, true) +
                            cudnn_sdpa_plan_workspace_bytes(graph, true, true);
  BOOST_TEST(workspace == kWsBatch * kWsHeads * time * 4 + kCudnnPlanWorkspaceAllowance +
                              kWsBatch * kWsHeads * 256 * 256 * 2);
  check_counted(dense_backward, cuda_allocation_size(workspace), "dense backward's workspace block");
}

BOOST_AUTO_TEST_CASE(argument_errors) {
  DeviceTensor q = device_tensor(DType::F32, {1, 4, 3, 8});
  DeviceTensor k = device_tensor(DType::F32, {1, 4, 2, 8});
  DeviceTensor out = device_tensor(DType::F32, {1, 4, 3, 8});
  DeviceTensor lse = device_tensor(DType::F32, {1, 3, 4});
  zt::test::check_error_mentions([&] { gpu().attention_forward(out, lse, q, k, k, Tensor(), 0.3f); },
                                 {"attention_forward", "multiple of key/value heads"});
  DeviceTensor big_q = device_tensor(DType::F32, {1, 4, 1, 1024});
  DeviceTensor big_out = device_tensor(DType::F32, {1, 4, 1, 1024});
  DeviceTensor big_lse = device_tensor(DType::F32, {1, 1, 4});
  zt::test::check_error_mentions(
      [&] { gpu().attention_forward(big_out, big_lse, big_q, big_q, big_q, Tensor(), 0.03f); },
      {"attention_forward", "head dim D = 1024", "shared memory"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
