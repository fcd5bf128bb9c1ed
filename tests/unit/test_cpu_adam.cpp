// Unit tests of cpu_adamw (backend/cpu/cpu_adam.h): bit-identical to a plain scalar loop with
// torch.optim.AdamW's operation order, close to a double-precision AdamW over several steps,
// for odd sizes, n = 0, both forms of torch's lerp, weight decay on and off; the bf16 copy of
// the updated parameter equals float_to_bf16 of it; the CPU backend's adamw op is the same code;
// every ISA path this CPU runs (cpu_isa.h) gives the generic path's bits; ZeRO-Offload's fused form
// (16-bit or scaled gradient in, 16-bit parameters out) gives the separate passes' bits; a forced path the CPU
// cannot run, or an unknown one, is an error. This file is compiled without multiply-add
// contraction (tests/CMakeLists.txt), as cpu_adam.cpp is, so the scalar loop rounds as it does.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_adam.h"
#include "backend/cpu/cpu_isa.h"
#include "core/dtype.h"
#include "test_helpers.h"
#include "test_util.h"

namespace {

using zt::test::check_close;
using zt::test::random_floats;

// AdamW over float arrays, one element at a time, written as torch's single-tensor AdamW
// orders the operations (mul_ for decay, lerp_, mul_ + addcmul_, sqrt / bc2_sqrt + eps,
// addcdiv_): the result cpu_adamw must reproduce bit for bit.
void scalar_adamw(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                  std::vector<float>& v, const zt::AdamWParams& params) {
  const double step = static_cast<double>(params.step);
  const double bc1 = params.bias_correction ? 1.0 - std::pow(params.beta1, step) : 1.0;
  const double bc2 = params.bias_correction ? 1.0 - std::pow(params.beta2, step) : 1.0;
  const float decay = static_cast<float>(1.0 - params.lr * params.weight_decay);
  const float w = static_cast<float>(1.0 - params.beta1);
  const float b2 = static_cast<float>(params.beta2);
  const float one_minus_b2 = static_cast<float>(1.0 - params.beta2);
  const float negative_step = static_cast<float>(-(params.lr / bc1));
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(params.eps);
  for (size_t i = 0; i < p.size(); ++i) {
    const float pi = p[i] * decay;
    const float mi = std::fabs(w) < 0.5f ? m[i] + w * (g[i] - m[i]) : g[i] - (g[i] - m[i]) * (1.0f - w);
    const float vi = v[i] * b2 + one_minus_b2 * g[i] * g[i];
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + negative_step * mi / denom;
  }
}

// The textbook AdamW in double (decoupled decay, bias correction).
void double_adamw(std::vector<double>& p, const std::vector<float>& g, std::vector<double>& m,
                  std::vector<double>& v, const zt::AdamWParams& params) {
  const double step = static_cast<double>(params.step);
  const double bc1 = params.bias_correction ? 1.0 - std::pow(params.beta1, step) : 1.0;
  const double bc2 = params.bias_correction ? 1.0 - std::pow(params.beta2, step) : 1.0;
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1.0 - params.lr * params.weight_decay;
    m[i] = params.beta1 * m[i] + (1.0 - params.beta1) * g[i];
    v[i] = params.beta2 * v[i] + (1.0 - params.beta2) * g[i] * g[i];
    p[i] -= params.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + params.eps);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      BOOST_ERROR(what << ": element " << i << " of " << a.size() << " is " << a[i] << ", expected " << b[i]);
      return false;
    }
  }
  return true;
}

std::vector<double> to_double(const std::vector<float>& values) { return {values.begin(), values.end()}; }

struct Case {
  double beta1;
  double weight_decay;
  bool bias_correction;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_adam)

BOOST_AUTO_TEST_CASE(matches_scalar_loop_bitwise_and_double_reference) {
  // Sizes: single elements, odd sizes around a SIMD width and a 4096-element chunk, and one
  // large enough to be split over threads, with odd tails everywhere.
  const std::vector<int64_t> sizes = {1, 3, 17, 4095, 4097, 100003};
  // beta1 = 0.9: lerp weight 0.1 (torch's m + w (g - m) form); beta1 = 0.3: weight 0.7 (the
  // g - (g - m)(1 - w) form). Weight decay off and on; bias correction on and off.
  const std::vector<Case> cases = {{0.9, 0.0, true}, {0.9, 0.1, true}, {0.3, 0.05, true}, {0.9, 0.01, false}};
  for (const Case& c : cases) {
    for (int64_t n : sizes) {
      const size_t size = static_cast<size_t>(n);
      zt::AdamWParams params;
      params.lr = 1e-2;
      params.beta1 = c.beta1;
      params.beta2 = 0.999;
      params.eps = 1e-8;
      params.weight_decay = c.weight_decay;
      params.bias_correction = c.bias_correction;
      std::vector<float> p = random_floats(size, 11u), m(size, 0.0f), v(size, 0.0f);
      std::vector<float> p_ref = p, m_ref = m, v_ref = v;
      std::vector<double> p_double = to_double(p), m_double(size, 0.0), v_double(size, 0.0);
      for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<float> g = random_floats(size, 100u + static_cast<uint32_t>(step), -2.0f, 2.0f);
        params.step = step;
        zt::cpu_adamw(p.data(), g.data(), m.data(), v.data(), n, params);
        scalar_adamw(p_ref, g, m_ref, v_ref, params);
        double_adamw(p_double, g, m_double, v_double, params);
        const std::string when = "n " + std::to_string(n) + " beta1 " + std::to_string(c.beta1) + " wd " +
                                 std::to_string(c.weight_decay) + (c.bias_correction ? "" : " uncorrected") +
                                 " step " + std::to_string(step);
        if (!same_bits(p, p_ref, "param, " + when) || !same_bits(m, m_ref, "exp_avg, " + when) ||
            !same_bits(v, v_ref, "exp_avg_sq, " + when))
          return;  // one report per failure, not thousands
        check_close(p, p_double, 2e-6, 1e-7, "param vs double, " + when);
        // exp_avg is a running sum of gradients up to 2 in size: where it nearly cancels, its
        // fp32 rounding (~ulp(2) = 2.4e-7) dominates, hence an absolute tolerance of 1e-6.
        check_close(m, m_double, 2e-6, 1e-6, "exp_avg vs double, " + when);
        check_close(v, v_double, 2e-6, 1e-9, "exp_avg_sq vs double, " + when);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(weight_decay_only_moves_params_by_the_decay_factor) {
  // With a zero gradient from zero moments the Adam term is 0 / (0 + eps) = 0: only the
  // decoupled decay acts, p * (1 - lr wd) exactly; without decay p is unchanged.
  const int64_t n = 4099;
  const std::vector<float> g(static_cast<size_t>(n), 0.0f);
  for (double weight_decay : {0.0, 0.1}) {
    std::vector<float> p = random_floats(static_cast<size_t>(n), 5u), m(p.size(), 0.0f), v(p.size(), 0.0f);
    const std::vector<float> before = p;
    zt::AdamWParams params;
    params.lr = 0.5;
    params.weight_decay = weight_decay;
    zt::cpu_adamw(p.data(), g.data(), m.data(), v.data(), n, params);
    const float factor = static_cast<float>(1.0 - 0.5 * weight_decay);
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] != before[i] * factor) {
        BOOST_ERROR("wd " << weight_decay << ": p[" << i << "] = " << p[i] << ", expected " << before[i] * factor);
        break;
      }
    }
    BOOST_TEST(m == std::vector<float>(p.size(), 0.0f));
    BOOST_TEST(v == std::vector<float>(p.size(), 0.0f));
  }
}

BOOST_AUTO_TEST_CASE(zero_elements_touch_nothing) {
  zt::AdamWParams params;
  zt::cpu_adamw(nullptr, nullptr, nullptr, nullptr, 0, params);  // no element, no access
  float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  uint16_t out = 0xABCD;
  zt::cpu_adamw(&p, &g, &m, &v, 0, params, &out);
  BOOST_TEST(p == 1.0f);
  BOOST_TEST(out == 0xABCD);
}

BOOST_AUTO_TEST_CASE(bf16_copy_is_the_rounded_update_in_the_same_pass) {
  const int64_t n = 50001;  // several chunks, odd tail
  const size_t size = static_cast<size_t>(n);
  zt::AdamWParams params;
  params.lr = 3e-3;
  params.weight_decay = 0.1;
  std::vector<float> p = random_floats(size, 21u, -4.0f, 4.0f), m(size, 0.0f), v(size, 0.0f);
  std::vector<float> p_plain = p, m_plain = m, v_plain = v;
  std::vector<uint16_t> bf16(size, 0xFFFF);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_floats(size, 200u + static_cast<uint32_t>(step));
    params.step = step;
    std::fill(bf16.begin(), bf16.end(), uint16_t{0xFFFF});  // a NaN pattern: a missed element shows
    zt::cpu_adamw(p.data(), g.data(), m.data(), v.data(), n, params, bf16.data());
    zt::cpu_adamw(p_plain.data(), g.data(), m_plain.data(), v_plain.data(), n, params);
    BOOST_REQUIRE(same_bits(p, p_plain, "param with bf16 output, step " + std::to_string(step)));
    BOOST_REQUIRE(same_bits(m, m_plain, "exp_avg with bf16 output"));
    BOOST_REQUIRE(same_bits(v, v_plain, "exp_avg_sq with bf16 output"));
    for (size_t i = 0; i < size; ++i) {
      if (bf16[i] != zt::float_to_bf16(p[i])) {
        BOOST_ERROR("bf16[" << i << "] = " << bf16[i] << ", float_to_bf16(" << p[i] << ") = " << zt::float_to_bf16(p[i]));
        break;
      }
    }
  }
  // The rounding is to nearest: every bf16 value lies within half a bf16 ulp (2^-8 relative).
  for (size_t i = 0; i < size; ++i)
    BOOST_REQUIRE(std::fabs(zt::bf16_to_float(bf16[i]) - p[i]) <= std::fabs(p[i]) * 0x1p-8f);
}

BOOST_AUTO_TEST_CASE(cpu_backend_adamw_is_cpu_adamw) {
  auto backend = zt::make_cpu_backend();
  const int64_t n = 70001;
  const size_t size = static_cast<size_t>(n);
  zt::AdamWParams params;
  params.lr = 1e-3;
  params.weight_decay = 0.01;
  std::vector<float> p = random_floats(size, 31u), m(size, 0.0f), v(size, 0.0f);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = random_floats(size, 300u + static_cast<uint32_t>(step));
    params.step = step;
    backend->optimizer_kernels().adamw(zt::test::view(p, {n}), zt::test::view(g, {n}), zt::test::view(m, {n}),
                                       zt::test::view(v, {n}), params);
    zt::cpu_adamw(p2.data(), g.data(), m2.data(), v2.data(), n, params);
  }
  same_bits(p, p2, "backend adamw param");
  same_bits(m, m2, "backend adamw exp_avg");
  same_bits(v, v2, "backend adamw exp_avg_sq");
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_errors) {
  float x = 1.0f;
  zt::AdamWParams params;
  params.step = 0;
  zt::test::check_error([&] { zt::cpu_adamw(&x, &x, &x, &x, 1, params); }, "cpu_adamw: step = 0");
  params.step = 1;
  zt::test::check_error([&] { zt::cpu_adamw(&x, &x, &x, &x, -1, params); }, "cpu_adamw: n = -1");
  zt::test::check_error([&] { zt::cpu_adamw(nullptr, &x, &x, &x, 1, params); }, "null array");
}

// Every path this CPU runs against the generic one, bit for bit: sizes around each SIMD width
// and the 4096-element chunk (odd tails, a single element, several chunks over the threads),
// both lerp forms, with and without the bf16 output, over several steps.
BOOST_AUTO_TEST_CASE(every_isa_path_matches_the_generic_path_bitwise) {
  const zt::CpuFeatures features = zt::cpu_features();
  const std::vector<int64_t> sizes = {1, 7, 8, 15, 16, 17, 33, 4095, 4097, 8193, 100003};
  for (zt::CpuIsa isa : {zt::CpuIsa::avx2, zt::CpuIsa::avx512}) {
    if (!zt::cpu_supports(isa, features)) {
      BOOST_TEST_MESSAGE("this CPU has no " << zt::cpu_isa_name(isa) << ": path not compared");
      continue;
    }
    for (double beta1 : {0.9, 0.3}) {  // lerp weight 0.1 (m + w (g - m)) and 0.7 (g - (g - m)(1 - w))
      for (bool bf16_out : {false, true}) {
        for (int64_t n : sizes) {
          const size_t size = static_cast<size_t>(n);
          zt::AdamWParams params;
          params.lr = 1e-2;
          params.beta1 = beta1;
          params.weight_decay = 0.05;
          std::vector<float> p = random_floats(size, 41u, -3.0f, 3.0f), m(size, 0.0f), v(size, 0.0f);
          std::vector<float> p_ref = p, m_ref = m, v_ref = v;
          std::vector<uint16_t> out(size, 0xFFFF), out_ref(size, 0xFFFF);
          for (int64_t step = 1; step <= 3; ++step) {
            const std::vector<float> g = random_floats(size, 400u + static_cast<uint32_t>(step), -2.0f, 2.0f);
            params.step = step;
            zt::cpu_adamw_on(isa, p.data(), g.data(), m.data(), v.data(), n, params, bf16_out ? out.data() : nullptr);
            zt::cpu_adamw_on(zt::CpuIsa::generic, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, params,
                             bf16_out ? out_ref.data() : nullptr);
          }
          const std::string when = std::string(zt::cpu_isa_name(isa)) + " n " + std::to_string(n) + " beta1 " +
                                   std::to_string(beta1) + (bf16_out ? " bf16 out" : "");
          BOOST_REQUIRE(same_bits(p, p_ref, "param, " + when));
          BOOST_REQUIRE(same_bits(m, m_ref, "exp_avg, " + when));
          BOOST_REQUIRE(same_bits(v, v_ref, "exp_avg_sq, " + when));
          BOOST_REQUIRE_MESSAGE(out == out_ref, "bf16 output, " << when);
        }
      }
    }
  }
}

// ZeRO-Offload's one pass (cpu_adamw_offload): a bf16/fp16/fp32 gradient times a scale, the
// parameters rounded to bf16/fp16 in the same pass, on every path this CPU runs, bit for bit
// against the separate passes the engine ran before: widen (exact), g * scale, cpu_adamw, round.
BOOST_AUTO_TEST_CASE(offload_passes_fused_match_the_separate_passes_bitwise) {
  const zt::CpuFeatures features = zt::cpu_features();
  const int64_t n = 9001;  // three chunks and an odd tail
  const size_t size = static_cast<size_t>(n);
  for (zt::CpuIsa isa : {zt::CpuIsa::generic, zt::CpuIsa::avx2, zt::CpuIsa::avx512}) {
    if (!zt::cpu_supports(isa, features)) continue;
    for (zt::DType grad_dtype : {zt::DType::F32, zt::DType::BF16, zt::DType::F16}) {
      for (zt::DType out_dtype : {zt::DType::BF16, zt::DType::F16}) {
        for (float scale : {1.0f, 1.0f / 3072.0f}) {  // no division; an fp16 loss scale x clip coefficient
          zt::AdamWParams params;
          params.lr = 1e-2;
          params.weight_decay = 0.05;
          std::vector<float> p = random_floats(size, 51u, -3.0f, 3.0f), m(size, 0.0f), v(size, 0.0f);
          std::vector<float> p_ref = p, m_ref = m, v_ref = v;
          std::vector<uint16_t> out(size, 0xFFFF);
          for (int64_t step = 1; step <= 2; ++step) {
            params.step = step;
            std::vector<float> g = random_floats(size, 500u + static_cast<uint32_t>(step), -3000.0f, 3000.0f);
            std::vector<uint16_t> g16(size);
            for (size_t i = 0; i < size; ++i) {  // the stored 16-bit gradient and its exact widening
              if (grad_dtype == zt::DType::F32) continue;
              g16[i] = grad_dtype == zt::DType::BF16 ? zt::float_to_bf16(g[i]) : zt::float_to_fp16(g[i]);
              g[i] = grad_dtype == zt::DType::BF16 ? zt::bf16_to_float(g16[i]) : zt::fp16_to_float(g16[i]);
            }
            const void* stored = grad_dtype == zt::DType::F32 ? static_cast<const void*>(g.data()) : g16.data();
            zt::cpu_adamw_offload_on(isa, p.data(), {stored, grad_dtype, scale}, m.data(), v.data(), n, params,
                                     {out.data(), out_dtype});
            for (float& value : g) value *= scale;  // the engine's scale pass
            zt::cpu_adamw_on(zt::CpuIsa::generic, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, params);
          }
          const std::string when = std::string(zt::cpu_isa_name(isa)) + " grad " + zt::dtype_name(grad_dtype) +
                                   " out " + zt::dtype_name(out_dtype) + " scale " + std::to_string(scale);
          BOOST_REQUIRE(same_bits(p, p_ref, "param, " + when));
          BOOST_REQUIRE(same_bits(m, m_ref, "exp_avg, " + when));
          BOOST_REQUIRE(same_bits(v, v_ref, "exp_avg_sq, " + when));
          for (size_t i = 0; i < size; ++i) {
            const uint16_t expected = out_dtype == zt::DType::BF16 ? zt::float_to_bf16(p[i]) : zt::float_to_fp16(p[i]);
            BOOST_REQUIRE_MESSAGE(out[i] == expected, "rounded output [" << i << "], " << when);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(isa_choice_and_forced_paths) {
  const zt::CpuFeatures none, avx2{true, false}, both{true, true};
  // Unforced (null or empty): the best path of the CPU.
  const auto chosen = [](const char* forced, const zt::CpuFeatures& features) {
    return std::string(zt::cpu_isa_name(zt::choose_cpu_isa(forced, features)));
  };
  BOOST_TEST(chosen(nullptr, none) == "generic");
  BOOST_TEST(chosen("", avx2) == "avx2");
  BOOST_TEST(chosen(nullptr, both) == "avx512");
  BOOST_TEST(chosen("avx2", both) == "avx2");
  BOOST_TEST(chosen("generic", both) == "generic");
  // A forced path the CPU lacks, or a name that is no path, is an error naming it and what the CPU runs.
  zt::test::check_error_mentions([&] { zt::choose_cpu_isa("avx512", avx2); },
                                 {"ZT_CPU_ISA=avx512", "cannot run", "generic, avx2)"});
  zt::test::check_error_mentions([&] { zt::choose_cpu_isa("avx2", none); }, {"ZT_CPU_ISA=avx2", "cannot run"});
  zt::test::check_error_mentions([&] { zt::choose_cpu_isa("sse9", both); },
                                 {"ZT_CPU_ISA=sse9", "unknown path", "avx512, avx2 or generic"});
  // The process's choice is ZT_CPU_ISA's (ctest runs this suite unforced and with ZT_CPU_ISA=generic).
  BOOST_TEST(zt::cpu_isa_name(zt::cpu_isa()) == chosen(std::getenv("ZT_CPU_ISA"), zt::cpu_features()));
  BOOST_TEST_MESSAGE("cpu_adamw runs the " << zt::cpu_isa_name(zt::cpu_isa()) << " path");
  // cpu_adamw_on refuses a path this CPU cannot run (where there is one to try).
  for (zt::CpuIsa isa : {zt::CpuIsa::avx2, zt::CpuIsa::avx512}) {
    if (zt::cpu_supports(isa, zt::cpu_features())) continue;
    float x = 1.0f;
    zt::test::check_error_mentions([&] { zt::cpu_adamw_on(isa, &x, &x, &x, &x, 1, zt::AdamWParams{}); },
                                   {"cpu_adamw", "cannot run", zt::cpu_isa_name(isa)});
  }
}

BOOST_AUTO_TEST_SUITE_END()
