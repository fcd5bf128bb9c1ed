// Element types and the fp32 <-> bf16/fp16 conversions (round to nearest, ties to even).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);          // "fp32", "bf16", "fp16", "int32", "int64", "uint8"
DType parse_compute_dtype(const std::string& name);  // fp32|float32|bf16|bfloat16|fp16|float16
bool is_float(DType dtype);

uint16_t float_to_bf16(float value);  // RNE; NaN stays NaN (quiet), overflow rounds to inf
float bf16_to_float(uint16_t bits);
uint16_t float_to_fp16(float value);  // RNE incl. subnormals; overflow to inf; NaN stays NaN
float fp16_to_float(uint16_t bits);

// The value a float takes after a round trip through `dtype` (identity for F32): this is
// how the CPU backend emulates bf16/fp16 storage.
float round_to(DType dtype, float value);

}  // namespace zt
