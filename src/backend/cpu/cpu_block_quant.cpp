// The CPU backend's block quantization for ZeRO++'s collectives (backend.h "quantize_blocks"):
// core/block_quant.h's rules, block by block in parallel.
#include <algorithm>
#include <cmath>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dtype_staging.h"
#include "core/block_quant.h"

namespace zt::cpu {

void CpuBackend::quantize_blocks(Tensor q, Tensor scales, Tensor in, int bits, int64_t block) {
  const char* op = "quantize_blocks";
  const int64_t n = in.numel();
  const int64_t blocks = expect_block_quant(op, q, scales, n, bits, block);
  expect_host(op, "q", q, DType::U8);
  float* scale_of = f32_arg(op, "scales", scales);
  uint8_t* codes = q.u8();
  Fp32Staging stage(op);
  const float* values = stage.read("in", in).f32();  // fp32 [n]
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(n, begin + block);
    float absmax = 0.0f;  // NaN wins (as fmaxf does not): the scale must carry it
    for (int64_t i = begin; i < end; ++i) {
      const float magnitude = std::fabs(values[i]);
      if (!(magnitude <= absmax)) absmax = magnitude;
    }
    const float scale = block_quant_scale(absmax, bits);
    scale_of[b] = scale;
    if (bits == 8) {
      for (int64_t i = begin; i < end; ++i) codes[i] = block_quant_code(values[i], scale, bits);
      continue;
    }
    for (int64_t i = begin; i < end; i += 2) {  // block is even: pairs never straddle two blocks
      const uint8_t low = block_quant_code(values[i], scale, bits);
      const uint8_t high = i + 1 < end ? block_quant_code(values[i + 1], scale, bits) : uint8_t{0};
      codes[i / 2] = static_cast<uint8_t>(low | (high << 4));
    }
  }
}

void CpuBackend::dequantize_blocks(Tensor out, Tensor q, Tensor scales, int bits, int64_t block, bool accumulate) {
  const char* op = "dequantize_blocks";
  const int64_t n = out.numel();
  expect_block_quant(op, q, scales, n, bits, block);
  const uint8_t* codes = u8_arg(op, "q", q);
  const float* scale_of = f32_arg(op, "scales", scales);
  Fp32Staging stage(op);
  float* values = (accumulate ? stage.update("out", out) : stage.write("out", out)).f32();  // fp32 [n]
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float value = block_quant_value(block_quant_code_at(codes, i, bits), scale_of[i / block], bits);
    values[i] = accumulate ? values[i] + value : value;
  }
  stage.write_back();
}

}  // namespace zt::cpu
