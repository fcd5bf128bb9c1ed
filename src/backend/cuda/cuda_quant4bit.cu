// The CUDA backend's 4-bit dequantization (QLoRA's frozen base): each thread writes 8
// consecutive values (16-byte stores where aligned), each value code[q] * absmax of its block in
// fp32, then rounded to out's dtype. Explicit __fmul_rn/__fadd_rn: the CPU reference's two
// roundings for double quantization, bit for bit.
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

struct Quant4Args {
  const uint8_t* packed;
  const float* absmax;        // fp32 [blocks] (not nested)
  const uint8_t* qabsmax;     // uint8 [blocks] (nested)
  const float* code;          // [16]
  const float* nested_absmax; // [ceil(blocks / 256)]
  const float* nested_code;   // [256]
  const float* nested_offset; // [1]
  int64_t blocksize;
};

__device__ inline float block_absmax(const Quant4Args& args, int64_t block) {
  if (!args.qabsmax) return args.absmax[block];
  const float scaled = __fmul_rn(args.nested_code[args.qabsmax[block]], args.nested_absmax[block / 256]);
  return __fadd_rn(scaled, args.nested_offset[0]);
}

template <class Format>
__global__ void dequantize_4bit_kernel(typename Format::Storage* out, int64_t n, Quant4Args args) {
  for_each_vector(n, [&](int64_t first) {
    float values[kVector];
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const int64_t i = first + k;
      if (i >= n) {
        values[k] = 0.0f;
        continue;
      }
      const uint8_t byte = args.packed[i / 2];
      const int index = (i % 2) ? (byte & 0x0F) : (byte >> 4);
      values[k] = __fmul_rn(args.code[index], block_absmax(args, i / args.blocksize));
    }
    store8<Format>(out, first, n, values);
  });
}

}  // namespace

void CudaBackendImpl::dequantize_4bit(Tensor out, const Quant4View& weight) {
  const char* op = "dequantize_4bit";
  expect_device_float(op, "out", out);
  const int64_t n = out.numel();
  expect_quant4_view(op, weight, n);
  expect_device(op, "packed", weight.packed);
  expect_device(op, "absmax", weight.absmax);
  expect_device(op, "code", weight.code);
  Quant4Args args{weight.packed.u8(), nullptr, nullptr, weight.code.f32(), nullptr, nullptr, nullptr, weight.blocksize};
  if (weight.nested()) {
    expect_device(op, "nested_absmax", weight.nested_absmax);
    expect_device(op, "nested_code", weight.nested_code);
    expect_device(op, "nested_offset", weight.nested_offset);
    args.qabsmax = weight.absmax.u8();
    args.nested_absmax = weight.nested_absmax.f32();
    args.nested_code = weight.nested_code.f32();
    args.nested_offset = weight.nested_offset.f32();
  } else {
    args.absmax = weight.absmax.f32();
  }
  if (n == 0) return;
  dispatch_float(out.dtype, op, "out", [&](auto format) {
    using Format = decltype(format);
    launch({grid_for(vectors_of(n)), kThreads, 0, stream_}, dequantize_4bit_kernel<Format>, data_of<Format>(out), n, args);
    ZT_CUDA_CHECK_LAUNCH("dequantize_4bit_kernel");
  });
}

}  // namespace zt::cuda
