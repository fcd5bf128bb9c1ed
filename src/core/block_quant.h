// Symmetric block-wise quantization for ZeRO++'s communication (docs/zero-plus-plus.md): qwZ
// sends gathered weights as int8, qgZ sends gradients as int4, each block of `block` consecutive
// values with one fp32 scale. The per-element rules live here, shared by the CPU and CUDA
// kernels (Backend::quantize_blocks / dequantize_blocks), so both give the same bits:
//   scale = absmax / qmax (qmax = 2^(bits-1) - 1: 127 or 7; 1 for an all-zero block; inf/NaN
//           when the block holds one, so that a dequantized block carries the overflow on)
//   q     = rint(x / scale) clamped to [-qmax, qmax] (round half to even; 0 where x / scale is NaN)
//   value = q * scale
// Stored biased by 2^(bits-1): int8 one byte per value, int4 two per byte (element 2i in the low
// nibble, 2i+1 in the high one).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZT_BLOCK_QUANT_FN __host__ __device__ inline
#else
#define ZT_BLOCK_QUANT_FN inline
#endif

namespace zt {

ZT_BLOCK_QUANT_FN int block_quant_qmax(int bits) { return (1 << (bits - 1)) - 1; }

// Bytes of n quantized values, and the number of blocks (scales) covering them.
ZT_BLOCK_QUANT_FN int64_t block_quant_bytes(int64_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }
ZT_BLOCK_QUANT_FN int64_t block_quant_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

ZT_BLOCK_QUANT_FN float block_quant_scale(float absmax, int bits) {
  return absmax == 0.0f ? 1.0f : absmax / static_cast<float>(block_quant_qmax(bits));
}

// The biased code of x (0 .. 2 qmax).
ZT_BLOCK_QUANT_FN uint8_t block_quant_code(float x, float scale, int bits) {
  const float qmax = static_cast<float>(block_quant_qmax(bits));
  float q = x / scale;
  if (q != q) q = 0.0f;  // NaN (a non-finite scale): the scale carries it
  q = rintf(q < -qmax ? -qmax : (q > qmax ? qmax : q));
  return static_cast<uint8_t>(static_cast<int>(q) + block_quant_qmax(bits) + 1);
}

ZT_BLOCK_QUANT_FN float block_quant_value(uint8_t code, float scale, int bits) {
  return static_cast<float>(static_cast<int>(code) - block_quant_qmax(bits) - 1) * scale;
}

// Element i's code from the packed bytes.
ZT_BLOCK_QUANT_FN uint8_t block_quant_code_at(const uint8_t* q, int64_t i, int bits) {
  if (bits == 8) return q[i];
  const uint8_t byte = q[i / 2];
  return (i % 2) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0F);
}

}  // namespace zt
