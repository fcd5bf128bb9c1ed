// The CPU backend's 4-bit dequantization (QLoRA's frozen base): core/quant4bit.h's reference
// loops, block by block in parallel, rounded into out's dtype.
#include "backend/arg_checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dtype_staging.h"
#include "core/quant4bit.h"

namespace zt::cpu {

void CpuBackend::dequantize_4bit(Tensor out, const Quant4View& weight) {
  const char* op = "dequantize_4bit";
  const int64_t n = out.numel();
  const int64_t blocks = expect_quant4_view(op, weight, n);
  const uint8_t* packed = u8_arg(op, "packed", weight.packed);
  const float* code = f32_arg(op, "code", weight.code);
  std::vector<float> absmax(static_cast<size_t>(blocks));
  if (weight.nested()) {
    dequantize_absmax(u8_arg(op, "absmax", weight.absmax), f32_arg(op, "nested_absmax", weight.nested_absmax),
                      f32_arg(op, "nested_code", weight.nested_code), *f32_arg(op, "nested_offset", weight.nested_offset),
                      blocks, absmax.data());
  } else {
    const float* stored = f32_arg(op, "absmax", weight.absmax);
    absmax.assign(stored, stored + blocks);
  }
  Fp32Staging stage(op);
  float* values = stage.write("out", out).f32();
  const int64_t blocksize = weight.blocksize;
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * blocksize;
    dequantize_4bit_range(packed, absmax.data(), code, blocksize, begin, std::min(blocksize, n - begin), values + begin);
  }
  stage.write_back();
}

}  // namespace zt::cpu
