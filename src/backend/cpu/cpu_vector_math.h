// exp and sigmoid written so the compiler can vectorise the loops that call them (softmax,
// cross-entropy, SiLU). glibc's expf is only vectorised under -ffast-math, and a scalar call
// per element would make the fused vocabulary softmax several times slower than PyTorch's.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

namespace zt::cpu {

// e^x within about 2 ulp for x in [-87, 88]; 0 below (results under ~1.6e-38 flush to zero),
// +inf above, NaN stays NaN. Method (Cody-Waite): x = n ln2 + r with integer n and
// |r| <= ln2/2, e^r by its Taylor polynomial of degree 7 (truncation error r^8/8! < 6e-9,
// under half an ulp), then scaled by 2^n built directly in the exponent bits.
inline float vector_exp(float x) {
  constexpr float kLowest = -87.0f;
  constexpr float kHighest = 88.0f;  // 88 * log2(e) < 127 - 0.5, so 2^n stays a normal float
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;         // ln 2 = kLn2High + kLn2Low; kLn2High has
  constexpr float kLn2Low = -2.12194440054690583e-4f;  // few bits, so n * kLn2High is exact
  constexpr float kRoundShift = 12582912.0f;       // 1.5 * 2^23: adding it rounds to an integer
  // Ternaries (not fmin/fmax) so a NaN passes through unchanged.
  float clamped = x < kLowest ? kLowest : x;
  clamped = clamped > kHighest ? kHighest : clamped;
  const float shifted = clamped * kLog2e + kRoundShift;  // n sits in the low mantissa bits
  const float n = shifted - kRoundShift;
  const float r = (clamped - n * kLn2High) - n * kLn2Low;
  float poly = 1.0f / 5040.0f;
  poly = poly * r + 1.0f / 720.0f;
  poly = poly * r + 1.0f / 120.0f;
  poly = poly * r + 1.0f / 24.0f;
  poly = poly * r + 1.0f / 6.0f;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundShift);
  const float two_to_n = std::bit_cast<float>((exponent + 127) << 23);
  float result = poly * two_to_n;
  result = x < kLowest ? 0.0f : result;
  result = x > kHighest ? std::numeric_limits<float>::infinity() : result;
  return result;
}

// 1 / (1 + e^-x): exact 0 and 1 in the tails, NaN stays NaN.
inline float vector_sigmoid(float x) { return 1.0f / (1.0f + vector_exp(-x)); }

}  // namespace zt::cpu
