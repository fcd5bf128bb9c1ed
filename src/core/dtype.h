// Element types and the fp32 <-> bf16/fp16 conversions (round to nearest, ties to even).
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

// F64 holds scalar accumulators only (a step's loss sum on the device); it is not a storage
// dtype of the float ops (is_float is false for it).
enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8, F64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);          // "fp32", "bf16", "fp16", "int32", "int64", "uint8", "fp64"
DType parse_compute_dtype(const std::string& name);  // fp32|float32|bf16|bfloat16|fp16|float16
bool is_float(DType dtype);

// RNE; NaN stays NaN (quiet), overflow rounds to inf. Inline: the CPU Adam's bf16 output loop
// vectorises only when it can see this.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (value != value) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep sign, quiet
  // Add 0x7FFF plus the lowest kept bit: rounds to nearest, ties to the even result.
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}
inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// RNE incl. subnormals; overflow rounds to inf; NaN becomes the quiet NaN 0x7E00 with its sign.
// Branch-free and inline, like float_to_bf16: the CPU Adam's fp16 loops (fp16 mixed precision
// with ZeRO-Offload) and the CPU backend's copies vectorise only when they see this; a call per
// element made the offloaded fp16 update 4.7x slower than the bf16 one.
inline uint16_t float_to_fp16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  // Normal fp16 (|x| >= 2^-14): rebias the exponent (127 -> 15), drop 13 mantissa bits, adding
  // 0xFFF plus the lowest kept bit first: round to nearest, ties to even (a carry may reach inf).
  const uint32_t normal = (abs_bits - (112u << 23) + 0xFFFu + ((abs_bits >> 13) & 1u)) >> 13;
  // Subnormal fp16 (|x| < 2^-14): the 24-bit significand shifted right by 126 - exponent (at
  // least 14; from 25 on everything falls off, so 31 stands for any larger shift), rounded to
  // nearest even the same way. (Zero and fp32 subnormals give 0 either way.)
  const int32_t exponent = static_cast<int32_t>(abs_bits >> 23);
  const int32_t unclamped = 126 - exponent;  // (no std::clamp: its references keep GCC from vectorising)
  const int32_t shift = unclamped < 14 ? 14 : unclamped > 31 ? 31 : unclamped;
  const uint32_t significand = (abs_bits & 0x7FFFFFu) | 0x800000u;
  const uint32_t below_half = (1u << (shift - 1)) - 1u;  // as the normal case's 0xFFF
  const uint32_t subnormal = (significand + below_half + ((significand >> shift) & 1u)) >> shift;
  uint32_t half = abs_bits >= 0x38800000u ? normal : subnormal;
  half = abs_bits >= 0x47800000u ? 0x7C00u : half;  // >= 65536: inf
  half = abs_bits > 0x7F800000u ? 0x7E00u : half;   // NaN
  return static_cast<uint16_t>(sign | half);
}
inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  // Subnormal or zero: mantissa x 2^-24, a normal fp32 for every mantissa > 0, built from
  // integers alone (GCC neither if-converts nor vectorises an int -> float conversion it might
  // have to skip): top = floor(log2 mantissa), counted as the shifts that leave a nonzero value.
  uint32_t top = 0;
  for (uint32_t k = 1; k < 10; ++k) top += ((mantissa >> k) + 0x3FFu) >> 10;  // 1 while mantissa >> k > 0
  const uint32_t subnormal = mantissa == 0 ? 0u : ((top + 103u) << 23) | ((mantissa << (23u - top)) & 0x7FFFFFu);
  uint32_t magnitude = ((exponent + 112u) << 23) | (mantissa << 13);
  magnitude = exponent == 0x1Fu ? (0x7F800000u | (mantissa << 13)) : magnitude;  // inf, NaN
  magnitude = exponent == 0 ? subnormal : magnitude;
  return std::bit_cast<float>(sign | magnitude);
}

// The value a float takes after a round trip through `dtype` (identity for F32): this is
// how the CPU backend emulates bf16/fp16 storage.
float round_to(DType dtype, float value);

}  // namespace zt
