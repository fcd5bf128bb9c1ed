// The CUDA backend's block quantization for ZeRO++'s collectives (backend.h "quantize_blocks"):
// core/block_quant.h's rules, bit for bit with the CPU backend. Quantize: one thread block per
// quantization block (the block's absmax reduced in shared memory, NaN winning, then every thread
// codes its values); dequantize: one thread per value, the accumulating add an explicit
// __fadd_rn so that it is never fused with the scale's product.
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "core/block_quant.h"

namespace zt::cuda {

namespace {

// The larger magnitude, NaN winning (fmaxf would drop it, and the scale must carry it on).
__device__ inline float magnitude_max(float a, float b) { return (b != b || b > a) ? b : a; }

template <class Format>
__global__ void quantize_blocks_kernel(uint8_t* q, float* scales, const typename Format::Storage* in, int64_t n,
                                       int64_t blocks, int64_t block, int bits) {
  ZT_SHARED(float, partial, [kThreads]);
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t begin = b * block, end = begin + block < n ? begin + block : n;
    float absmax = 0.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      absmax = magnitude_max(absmax, fabsf(Format::to_float(in[i])));
    partial[threadIdx.x] = absmax;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned int t = 1; t < blockDim.x; ++t) absmax = magnitude_max(absmax, partial[t]);
      partial[0] = absmax;
    }
    __syncthreads();
    const float scale = block_quant_scale(partial[0], bits);
    __syncthreads();  // partial is rewritten by the next block's loop
    if (threadIdx.x == 0) scales[b] = scale;
    if (bits == 8) {
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
        q[i] = block_quant_code(Format::to_float(in[i]), scale, bits);
      continue;
    }
    for (int64_t i = begin + 2 * threadIdx.x; i < end; i += 2 * blockDim.x) {  // pairs: block is even
      const uint8_t low = block_quant_code(Format::to_float(in[i]), scale, bits);
      const uint8_t high = i + 1 < end ? block_quant_code(Format::to_float(in[i + 1]), scale, bits) : uint8_t{0};
      q[i / 2] = static_cast<uint8_t>(low | (high << 4));
    }
  }
}

template <class Format>
__global__ void dequantize_blocks_kernel(typename Format::Storage* out, const uint8_t* q, const float* scales,
                                         int64_t n, int64_t block, int bits, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float value = block_quant_value(block_quant_code_at(q, i, bits), scales[i / block], bits);
    if (accumulate) value = __fadd_rn(Format::to_float(out[i]), value);
    out[i] = Format::from_float(value);
  }
}

}  // namespace

void CudaBackendImpl::quantize_blocks(Tensor q, Tensor scales, Tensor in, int bits, int64_t block) {
  const char* op = "quantize_blocks";
  expect_device_float(op, "in", in);
  const int64_t n = in.numel();
  const int64_t blocks = expect_block_quant(op, q, scales, n, bits, block);
  expect_device(op, "q", q, DType::U8);
  expect_device(op, "scales", scales, DType::F32);
  if (n == 0) return;
  dispatch_float(in.dtype, op, "in", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(blocks), kThreads, 0, stream_}, quantize_blocks_kernel<Format>, q.u8(), scales.f32(),
           data_of<Format>(in), n, blocks, block, bits);
    ZT_CUDA_CHECK_LAUNCH("quantize_blocks_kernel");
  });
}

void CudaBackendImpl::dequantize_blocks(Tensor out, Tensor q, Tensor scales, int bits, int64_t block, bool accumulate) {
  const char* op = "dequantize_blocks";
  expect_device_float(op, "out", out);
  const int64_t n = out.numel();
  expect_block_quant(op, q, scales, n, bits, block);
  expect_device(op, "q", q, DType::U8);
  expect_device(op, "scales", scales, DType::F32);
  if (n == 0) return;
  dispatch_float(out.dtype, op, "out", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(n), kThreads, 0, stream_}, dequantize_blocks_kernel<Format>, data_of<Format>(out), q.u8(),
           static_cast<const float*>(scales.f32()), n, block, bits, accumulate);
    ZT_CUDA_CHECK_LAUNCH("dequantize_blocks_kernel");
  });
}

}  // namespace zt::cuda
