// Element types: sizes, names, parsing, round trips. (The fp32 <-> bf16/fp16 conversions are
// inline in dtype.h, written from the IEEE 754 binary16 and bfloat16 layouts: bf16 is the top 16
// bits of fp32; fp16 has 5 exponent bits (bias 15) and 10 mantissa bits.)
#include "core/dtype.h"

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

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::F32: return value;
    case DType::BF16: return bf16_to_float(float_to_bf16(value));
    case DType::F16: return fp16_to_float(float_to_fp16(value));
    default: fail("round_to: ", dtype_name(dtype), " is not a float type");
  }
}

}  // namespace zt
