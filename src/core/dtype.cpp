// fp32 <-> bf16/fp16 bit conversions. Written from the IEEE 754 binary16 and bfloat16 layouts:
// bf16 is the top 16 bits of fp32; fp16 has 5 exponent bits (bias 15) and 10 mantissa bits.
#include "core/dtype.h"

#include <bit>
#include <cmath>

#include "core/error.h"

namespace zt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::F64: return 8;
  }
  fail("unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::F64: return "fp64";
  }
  return "unknown";
}

DType parse_compute_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp16" || name == "float16") return DType::F16;
  fail("unknown compute dtype '", name, "' (expected fp32, bf16 or fp16)");
}

bool is_float(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
}


uint16_t float_to_fp16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (abs_bits >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u); // >= 65536: inf
  int exponent = static_cast<int>(abs_bits >> 23) - 127;  // unbiased fp32 exponent
  uint32_t mantissa = (abs_bits & 0x7FFFFFu) | 0x800000u;  // with the implicit 1 (24 bits)
  if (exponent >= -14) {
    // Normal fp16: keep 11 significant bits, drop 13, round to nearest even.
    uint32_t half_bits = static_cast<uint32_t>(exponent + 15) << 10 | ((mantissa >> 13) & 0x3FFu);
    uint32_t dropped = mantissa & 0x1FFFu;
    if (dropped > 0x1000u || (dropped == 0x1000u && (half_bits & 1u))) half_bits += 1;  // may carry into inf
    return static_cast<uint16_t>(sign | half_bits);
  }
  if (exponent < -25) return sign;  // below half the smallest subnormal: rounds to zero
  if (abs_bits == 0) return sign;
  // Subnormal fp16: value = m * 2^-24 with m in [0, 1023].
  int shift = -exponent - 14 + 13;  // how many of the 24 mantissa bits fall off
  uint32_t half_bits = mantissa >> shift;
  uint32_t dropped = mantissa & ((1u << shift) - 1u);
  uint32_t halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (half_bits & 1u))) half_bits += 1;
  return static_cast<uint16_t>(sign | half_bits);
}

float fp16_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal or zero
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::F32: return value;
    case DType::BF16: return bf16_to_float(float_to_bf16(value));
    case DType::F16: return fp16_to_float(float_to_fp16(value));
    default: fail("round_to: ", dtype_name(dtype), " is not a float type");
  }
}

}  // namespace zt
