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
uint16_t float_to_fp16(float value);  // RNE incl. subnormals; overflow to inf; NaN stays NaN
float fp16_to_float(uint16_t bits);

// The value a float takes after a round trip through `dtype` (identity for F32): this is
// how the CPU backend emulates bf16/fp16 storage.
float round_to(DType dtype, float value);

}  // namespace zt
