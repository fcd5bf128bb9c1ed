// Unit tests of the fp32 <-> bf16/fp16 conversions (core/dtype.h): special values, overflow,
// subnormals and ties to even at chosen points, exhaustive round trips of every 16-bit pattern,
// a sweep of random floats against an independent rounding written in double precision, and the
// same in loops the compiler vectorises.
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace {

using zt::bf16_to_float;
using zt::float_to_bf16;
using zt::float_to_fp16;
using zt::fp16_to_float;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

// The float a format with `mantissa_bits` stored fraction bits, smallest normal exponent
// `min_exponent` and largest finite `max_finite` rounds x to, by round to nearest even in double
// (the quantum below is a power of two and x has 24 significant bits, so x / quantum is exact
// and std::nearbyint in the default rounding mode does the tie to even).
double reference_round(float x, int mantissa_bits, int min_exponent, double max_finite) {
  if (x == 0.0f || std::isinf(x)) return x;
  int exponent = 0;
  std::frexp(static_cast<double>(std::fabs(x)), &exponent);  // |x| = f 2^exponent, f in [0.5, 1)
  const int unbiased = std::max(exponent - 1, min_exponent);  // below: the subnormal spacing
  const double quantum = std::ldexp(1.0, unbiased - mantissa_bits);
  const double rounded = std::nearbyint(std::fabs(static_cast<double>(x)) / quantum) * quantum;
  const double magnitude = rounded > max_finite ? std::numeric_limits<double>::infinity() : rounded;
  return std::copysign(magnitude, static_cast<double>(x));
}

double reference_fp16(float x) { return reference_round(x, 10, -14, 65504.0); }
double reference_bf16(float x) { return reference_round(x, 7, -126, 3.3895313892515355e38); }

}  // namespace

BOOST_AUTO_TEST_SUITE(dtype)

BOOST_AUTO_TEST_CASE(special_values) {
  for (float nan : {kNaN, -kNaN, from_bits(0x7F800001u) /* signalling */, from_bits(0xFFC00123u)}) {
    const bool negative = std::signbit(nan);
    BOOST_TEST(std::isnan(bf16_to_float(float_to_bf16(nan))), "bf16 keeps NaN " << std::bit_cast<uint32_t>(nan));
    BOOST_TEST(std::signbit(bf16_to_float(float_to_bf16(nan))) == negative);
    BOOST_TEST(std::isnan(fp16_to_float(float_to_fp16(nan))), "fp16 keeps NaN " << std::bit_cast<uint32_t>(nan));
    BOOST_TEST(std::signbit(fp16_to_float(float_to_fp16(nan))) == negative);
  }
  BOOST_TEST(float_to_bf16(kInf) == 0x7F80u);
  BOOST_TEST(float_to_bf16(-kInf) == 0xFF80u);
  BOOST_TEST(float_to_fp16(kInf) == 0x7C00u);
  BOOST_TEST(float_to_fp16(-kInf) == 0xFC00u);
  BOOST_TEST(float_to_bf16(0.0f) == 0x0000u);
  BOOST_TEST(float_to_bf16(-0.0f) == 0x8000u);
  BOOST_TEST(float_to_fp16(0.0f) == 0x0000u);
  BOOST_TEST(float_to_fp16(-0.0f) == 0x8000u);
  BOOST_TEST(std::signbit(fp16_to_float(0x8000u)));
  BOOST_TEST(fp16_to_float(0x7C00u) == kInf);
  BOOST_TEST(fp16_to_float(0xFC00u) == -kInf);
  BOOST_TEST(std::isnan(fp16_to_float(0x7C01u)));
  BOOST_TEST(std::isnan(fp16_to_float(0xFE00u)));
}

BOOST_AUTO_TEST_CASE(max_finite_and_overflow) {
  // fp16: max finite 65504 (0x7BFF); the next would be 65536, halfway 65520 rounds (to even) up.
  BOOST_TEST(float_to_fp16(65504.0f) == 0x7BFFu);
  BOOST_TEST(fp16_to_float(0x7BFFu) == 65504.0f);
  BOOST_TEST(float_to_fp16(65519.0f) == 0x7BFFu);
  BOOST_TEST(float_to_fp16(65519.996f) == 0x7BFFu);
  BOOST_TEST(float_to_fp16(65520.0f) == 0x7C00u);
  BOOST_TEST(float_to_fp16(-65520.0f) == 0xFC00u);
  BOOST_TEST(float_to_fp16(1e10f) == 0x7C00u);
  BOOST_TEST(float_to_fp16(std::numeric_limits<float>::max()) == 0x7C00u);
  // bf16: max finite 0x7F7F; the halfway point to 2^128 (0x7F7F8000) ties to even = inf.
  BOOST_TEST(float_to_bf16(bf16_to_float(0x7F7Fu)) == 0x7F7Fu);
  BOOST_TEST(float_to_bf16(from_bits(0x7F7F7FFFu)) == 0x7F7Fu);
  BOOST_TEST(float_to_bf16(from_bits(0x7F7F8000u)) == 0x7F80u);
  BOOST_TEST(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80u);
  BOOST_TEST(float_to_bf16(-std::numeric_limits<float>::max()) == 0xFF80u);
}

BOOST_AUTO_TEST_CASE(fp16_subnormals) {
  const float smallest = std::ldexp(1.0f, -24);  // 2^-24, fp16 0x0001
  BOOST_TEST(float_to_fp16(smallest) == 0x0001u);
  BOOST_TEST(fp16_to_float(0x0001u) == smallest);
  BOOST_TEST(float_to_fp16(-smallest) == 0x8001u);
  BOOST_TEST(float_to_fp16(smallest / 2) == 0x0000u);   // exactly half: ties to even (0)
  BOOST_TEST(float_to_fp16(-smallest / 2) == 0x8000u);
  BOOST_TEST(float_to_fp16(std::nextafter(smallest / 2, 1.0f)) == 0x0001u);  // above half: up
  BOOST_TEST(float_to_fp16(std::nextafter(smallest / 2, 0.0f)) == 0x0000u);  // below half: 0
  BOOST_TEST(float_to_fp16(smallest / 4) == 0x0000u);
  BOOST_TEST(float_to_fp16(std::ldexp(1.0f, -40)) == 0x0000u);
  BOOST_TEST(float_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000u);
  BOOST_TEST(float_to_fp16(1.5f * smallest) == 0x0002u);  // tie between 1 and 2: even
  BOOST_TEST(float_to_fp16(2.5f * smallest) == 0x0002u);  // tie between 2 and 3: even
  BOOST_TEST(float_to_fp16(1023.0f * smallest) == 0x03FFu);  // largest subnormal
  BOOST_TEST(float_to_fp16(1023.5f * smallest) == 0x0400u);  // tie: up to the smallest normal
  BOOST_TEST(float_to_fp16(std::ldexp(1.0f, -14)) == 0x0400u);
  BOOST_TEST(fp16_to_float(0x03FFu) == 1023.0f * smallest);
}

BOOST_AUTO_TEST_CASE(ties_to_even_in_normals) {
  // fp16 has 10 fraction bits: 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10 (odd).
  BOOST_TEST(float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00u);
  BOOST_TEST(float_to_fp16(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 0x3C02u);
  BOOST_TEST(float_to_fp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3C01u);
  BOOST_TEST(float_to_fp16(-(1.0f + std::ldexp(1.0f, -11))) == 0xBC00u);
  BOOST_TEST(float_to_fp16(2047.0f) == 0x67FFu);  // exact
  BOOST_TEST(float_to_fp16(2049.0f) == 0x6800u);  // tie between 2048 (even) and 2050
  BOOST_TEST(float_to_fp16(2051.0f) == 0x6802u);  // tie between 2050 (odd) and 2052
  // bf16 has 7 fraction bits: 1 + 2^-8 is halfway between 1 (0x3F80) and 1 + 2^-7 (0x3F81).
  BOOST_TEST(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80u);
  BOOST_TEST(float_to_bf16(1.0f + 3.0f * std::ldexp(1.0f, -8)) == 0x3F82u);
  BOOST_TEST(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3F81u);
  BOOST_TEST(float_to_bf16(-(1.0f + std::ldexp(1.0f, -8))) == 0xBF80u);
  // bf16 keeps fp32's exponent range: subnormal floats round on the same rule.
  BOOST_TEST(float_to_bf16(from_bits(0x00008000u)) == 0x0000u);
  BOOST_TEST(float_to_bf16(from_bits(0x00018000u)) == 0x0002u);
  BOOST_TEST(float_to_bf16(from_bits(0x00008001u)) == 0x0001u);
}

BOOST_AUTO_TEST_CASE(every_fp16_pattern_round_trips) {
  for (uint32_t pattern = 0; pattern <= 0xFFFFu; ++pattern) {
    const uint16_t bits = static_cast<uint16_t>(pattern);
    const float value = fp16_to_float(bits);
    // The value from the binary16 layout: sign, 5 exponent bits (bias 15), 10 fraction bits.
    const int exponent = (bits >> 10) & 0x1F;
    const int fraction = bits & 0x3FF;
    const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    if (exponent == 31) {
      BOOST_REQUIRE(fraction == 0 ? value == static_cast<float>(sign * kInf) : std::isnan(value));
    } else {
      const double expected = exponent == 0 ? sign * std::ldexp(fraction, -24)
                                            : sign * std::ldexp(1024 + fraction, exponent - 25);
      BOOST_REQUIRE_MESSAGE(value == expected, "fp16 " << pattern << " decodes to " << value);
    }
    const uint16_t back = float_to_fp16(value);
    if (std::isnan(value)) {
      BOOST_REQUIRE(std::isnan(fp16_to_float(back)));
      BOOST_REQUIRE((back & 0x8000u) == (bits & 0x8000u));
    } else {
      BOOST_REQUIRE_MESSAGE(back == bits, "fp16 " << pattern << " comes back as " << back);
    }
  }
}

BOOST_AUTO_TEST_CASE(every_bf16_pattern_round_trips) {
  for (uint32_t pattern = 0; pattern <= 0xFFFFu; ++pattern) {
    const uint16_t bits = static_cast<uint16_t>(pattern);
    const float value = bf16_to_float(bits);
    BOOST_REQUIRE(std::bit_cast<uint32_t>(value) == pattern << 16);  // the top half of fp32
    const uint16_t back = float_to_bf16(value);
    if (std::isnan(value)) {
      BOOST_REQUIRE(std::isnan(bf16_to_float(back)));
      BOOST_REQUIRE((back & 0x8000u) == (bits & 0x8000u));
    } else {
      BOOST_REQUIRE_MESSAGE(back == bits, "bf16 " << pattern << " comes back as " << back);
    }
  }
}

BOOST_AUTO_TEST_CASE(random_floats_round_like_the_reference) {
  // Random bit patterns over all floats, and over the exponents where fp16 is interesting
  // (2^-27 .. 2^16: below the subnormals to beyond the overflow).
  std::mt19937 engine(2024);
  std::uniform_int_distribution<uint32_t> any_bits(0u, 0xFFFFFFFFu);
  std::uniform_int_distribution<uint32_t> fp16_exponents(127u - 27u, 127u + 16u);
  int fp16_failures = 0, bf16_failures = 0;
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = any_bits(engine);
    if (i % 2) bits = (bits & 0x807FFFFFu) | (fp16_exponents(engine) << 23);
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    if (static_cast<double>(fp16_to_float(float_to_fp16(x))) != reference_fp16(x) && fp16_failures++ < 5) {
      BOOST_ERROR("fp16 rounding of " << x << " (bits " << bits << ")");
    }
    if (static_cast<double>(bf16_to_float(float_to_bf16(x))) != reference_bf16(x) && bf16_failures++ < 5) {
      BOOST_ERROR("bf16 rounding of " << x << " (bits " << bits << ")");
    }
  }
  BOOST_TEST(fp16_failures == 0);
  BOOST_TEST(bf16_failures == 0);
  // round_to is the same round trip, and the identity for fp32.
  BOOST_TEST(zt::round_to(zt::DType::F16, 65520.0f) == kInf);
  BOOST_TEST(zt::round_to(zt::DType::BF16, 1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  BOOST_TEST(zt::round_to(zt::DType::F32, 0.1f) == 0.1f);
}

// The conversions are branch-free so that loops over arrays vectorise (the CPU Adam's fp16
// output and the CPU backend's copies): run them that way, over every float whose 13 (fp16
// normal) or up to 24 (subnormal) dropped bits sit at a rounding boundary, at every exponent and
// sign, and every fp16 pattern back. (Against the earlier scalar code they were checked
// exhaustively, all 2^32 floats, in AVX2 and AVX-512 loops, once: not repeated here.)
BOOST_AUTO_TEST_CASE(fp16_conversions_in_vectorised_loops) {
  std::vector<float> in;
  for (uint32_t high = 0; high < (1u << 19); ++high)  // sign, exponent, top 10 fraction bits
    for (uint32_t low : {0x0u, 0x1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu})
      in.push_back(from_bits(high << 13 | low));
  for (uint32_t exponent = 100; exponent < 114; ++exponent)  // subnormal fp16: more bits drop
    for (uint32_t fraction = 0; fraction < (1u << 23); fraction += 4099u) in.push_back(from_bits(exponent << 23 | fraction));
  std::vector<uint16_t> half(in.size());
  std::vector<float> back(in.size());
  const float* __restrict x = in.data();
  uint16_t* __restrict h = half.data();
  float* __restrict y = back.data();
  const int64_t n = static_cast<int64_t>(in.size());
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) h[i] = float_to_fp16(x[i]);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_float(h[i]);
  int failures = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool nan = std::isnan(x[i]);
    const bool ok = nan ? (h[i] & 0x7FFFu) == 0x7E00u && std::signbit(x[i]) == bool(h[i] & 0x8000u)
                        : static_cast<double>(y[i]) == reference_fp16(x[i]) && std::signbit(y[i]) == std::signbit(x[i]);
    if (!ok && failures++ < 5) BOOST_ERROR("fp16 of bits " << std::bit_cast<uint32_t>(x[i]) << " is " << h[i]);
  }
  BOOST_TEST(failures == 0);
  BOOST_TEST(n > 3000000);
}

BOOST_AUTO_TEST_SUITE_END()
