// Device-side building blocks shared by the CUDA backend's kernels: storage formats (fp32,
// bf16, fp16 as bits) with their fp32 conversions, 16-byte vector loads/stores of 8 elements,
// a runtime-dtype accessor for small parameter vectors, deterministic warp/block reductions,
// grid sizing, and the host-side dtype dispatch that picks a kernel instantiation.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_launch.h"
#include "core/dtype.h"
#include "core/error.h"

namespace zt::cuda {

// ---- storage formats --------------------------------------------------------------------------
// A kernel templated on a Format reads Format::Storage from memory and computes in fp32.

struct Fp32Format {
  using Storage = float;
  __device__ static float to_float(float value) { return value; }
  __device__ static float from_float(float value) { return value; }
};

struct Bf16Format {
  using Storage = uint16_t;
  // bf16 is the top half of an fp32: widening is a shift (exact).
  __device__ static float to_float(uint16_t bits) { return __uint_as_float(uint32_t{bits} << 16); }
  // Round to nearest even; NaN stays NaN, overflow becomes inf (as float_to_bf16 on the host).
  __device__ static uint16_t from_float(float value) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
  }
};

struct Fp16Format {
  using Storage = uint16_t;
  __device__ static float to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
  // Round to nearest even incl. subnormals; overflow becomes inf (as float_to_fp16).
  __device__ static uint16_t from_float(float value) {
    return __half_as_ushort(__float2half_rn(value));
  }
};

// ---- 8 elements per thread, 16-byte accesses -------------------------------------------------

constexpr int kVector = 8;  // elements per load8/store8: 16 bytes of bf16/fp16, 32 of fp32

template <class Format>
__device__ inline bool vector_ready(const typename Format::Storage* pointer, int64_t first,
                                    int64_t count) {
  return first + kVector <= count && (reinterpret_cast<uintptr_t>(pointer + first) & 15u) == 0;
}

// values[k] = element first + k of base[count] (0 past the end), as fp32.
template <class Format>
__device__ inline void load8(const typename Format::Storage* base, int64_t first, int64_t count,
                             float (&values)[kVector]) {
  if (vector_ready<Format>(base, first, count)) {
    if constexpr (sizeof(typename Format::Storage) == 4) {
      const float4* source = reinterpret_cast<const float4*>(base + first);
      const float4 low = source[0], high = source[1];
      values[0] = low.x, values[1] = low.y, values[2] = low.z, values[3] = low.w;
      values[4] = high.x, values[5] = high.y, values[6] = high.z, values[7] = high.w;
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(base + first);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        values[2 * k] = Format::to_float(static_cast<uint16_t>(words[k] & 0xFFFFu));
        values[2 * k + 1] = Format::to_float(static_cast<uint16_t>(words[k] >> 16));
      }
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kVector; ++k) {
    values[k] = first + k < count ? Format::to_float(base[first + k]) : 0.0f;
  }
}

// Element first + k of base[count] = values[k] for the elements that exist.
template <class Format>
__device__ inline void store8(typename Format::Storage* base, int64_t first, int64_t count,
                              const float (&values)[kVector]) {
  if (vector_ready<Format>(base, first, count)) {
    if constexpr (sizeof(typename Format::Storage) == 4) {
      float4* target = reinterpret_cast<float4*>(base + first);
      target[0] = make_float4(values[0], values[1], values[2], values[3]);
      target[1] = make_float4(values[4], values[5], values[6], values[7]);
    } else {
      uint32_t words[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        words[k] = uint32_t{Format::from_float(values[2 * k])} |
                   (uint32_t{Format::from_float(values[2 * k + 1])} << 16);
      }
      *reinterpret_cast<uint4*>(base + first) = make_uint4(words[0], words[1], words[2], words[3]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kVector; ++k) {
    if (first + k < count) base[first + k] = Format::from_float(values[k]);
  }
}

// ---- runtime-dtype access for small vectors (norm weights, biases, their gradients) ----------
// One branch on a value every thread shares, so no divergence; used where templating on a
// second dtype would double the kernel instantiations for no measurable gain.
struct FloatArg {
  void* data = nullptr;
  DType dtype = DType::F32;

  __device__ float load(int64_t i) const {
    if (dtype == DType::F32) return static_cast<const float*>(data)[i];
    const uint16_t bits = static_cast<const uint16_t*>(data)[i];
    return dtype == DType::BF16 ? Bf16Format::to_float(bits) : Fp16Format::to_float(bits);
  }
  __device__ void store(int64_t i, float value) const {
    if (dtype == DType::F32) {
      static_cast<float*>(data)[i] = value;
    } else {
      static_cast<uint16_t*>(data)[i] =
          dtype == DType::BF16 ? Bf16Format::from_float(value) : Fp16Format::from_float(value);
    }
  }
};

inline FloatArg float_arg(const Tensor& tensor) { return FloatArg{tensor.data, tensor.dtype}; }

// ---- deterministic reductions ----------------------------------------------------------------
// Butterfly (xor) shuffles: every lane ends with the same value, and each pairwise sum is taken
// in the same order on every run, so results are bitwise reproducible.

template <class Value>
__device__ inline Value warp_sum(Value value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
  }
  return value;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. scratch: Value[32] in shared memory; the call ends with a barrier so scratch can be
// reused at once.
template <class Value>
__device__ inline Value block_sum(Value value, Value* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  Value total = lane < warps ? scratch[lane] : Value(0);
  total = warp_sum(total);  // every warp sums the warp totals in the same order
  __syncthreads();
  return total;
}

__device__ inline float block_max(float value, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_max(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : -INFINITY;
  total = warp_max(total);
  __syncthreads();
  return total;
}

// ---- launch geometry ---------------------------------------------------------------------------

constexpr int kThreads = 256;  // threads per block of the elementwise and row kernels

// Blocks for `items` work items of kThreads threads each, capped (grid-stride loops do the
// rest): enough to fill any current GPU many times over.
inline unsigned int grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// One block per row, grid-stride beyond the grid limit.
inline unsigned int row_grid(int64_t rows) {
  constexpr int64_t kMaxBlocks = 65535;
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows < kMaxBlocks ? rows : kMaxBlocks));
}

// Number of 8-element vectors covering n elements.
__host__ __device__ inline int64_t vectors_of(int64_t n) { return (n + kVector - 1) / kVector; }

// Threads of a row kernel's block (one block per row, kernels written for any multiple of 32):
// one per 8-element vector of the row, in whole warps, at most kThreads. A 64-wide row gets one
// warp rather than 8 mostly idle ones (and the block reduction 1 warp's shuffles, not 8's).
inline unsigned int row_threads(int64_t cols) {
  const int64_t warps = (vectors_of(cols) + 31) / 32;
  return static_cast<unsigned int>(warps < 1 ? 32 : (warps * 32 < kThreads ? warps * 32 : kThreads));
}

// Grid-stride loop over the 8-element vectors of n elements: body(first element index).
template <class Body>
__device__ inline void for_each_vector(int64_t n, Body body) {
  const int64_t vectors = vectors_of(n);
  for (int64_t v = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; v < vectors;
       v += int64_t{gridDim.x} * blockDim.x) {
    body(v * kVector);
  }
}

// ---- host-side dtype dispatch ------------------------------------------------------------------
// A tensor's data as the storage type of `Format` (after the op has checked its dtype).
template <class Format>
typename Format::Storage* data_of(const Tensor& tensor) {
  return static_cast<typename Format::Storage*>(tensor.data);
}

// Calls body(Format{}) for the float dtype of `tensor`; other dtypes are an error naming the op.
template <class Body>
void dispatch_float(DType dtype, const char* op, const char* arg, Body&& body) {
  switch (dtype) {
    case DType::F32: body(Fp32Format{}); return;
    case DType::BF16: body(Bf16Format{}); return;
    case DType::F16: body(Fp16Format{}); return;
    default: break;
  }
  fail(op, ": ", arg, " must be fp32, bf16 or fp16, got ", dtype_name(dtype));
}

}  // namespace zt::cuda
