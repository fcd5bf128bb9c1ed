// Shared pieces of the CUDA backend's attention kernels (cuda_attention_forward.cu,
// cuda_attention_backward.cu): tile sizes, a shared-memory block GEMM, tile loads/stores, the
// tensor geometry, and the host-side argument checks and shared-memory opt-in.
#pragma once
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda::attention {

template <class Format>
using Storage = typename Format::Storage;

// Forward tiles: 64 queries x 64 keys, 256 threads. Backward: 32 x 32, 128 threads (its
// kernels hold six D-wide tiles in shared memory).
constexpr int kForwardTile = 64;
constexpr int kForwardThreads = 256;
constexpr int kBackwardTile = 32;
constexpr int kBackwardThreads = 128;

// out[rows, cols] = alpha op(A)[rows, depth] op(B)[depth, cols] (+ row_scale[r] out[r, c] when
// accumulating; row_scale null means 1), all fp32 in shared memory, with
// op(A)(r, i) = kTransA ? a[i * lda + r] : a[r * lda + i] and
// op(B)(i, c) = kTransB ? b[c * ldb + i] : b[i * ldb + c].
// Each thread computes kMicro x kMicro outputs at rows row_group + i * row_groups and columns
// col_group + j * col_groups: neighbouring lanes touch neighbouring columns (no bank
// conflicts with the padded leading dimensions used below).
template <bool kTransA, bool kTransB, int kMicro>
__device__ inline void block_gemm(float* out, int ldo, const float* a, int lda, const float* b,
                                  int ldb, int rows, int cols, int depth, float alpha,
                                  bool accumulate, const float* row_scale = nullptr) {
  const int row_groups = (rows + kMicro - 1) / kMicro;
  const int col_groups = (cols + kMicro - 1) / kMicro;
  for (int item = threadIdx.x; item < row_groups * col_groups; item += blockDim.x) {
    const int row_group = item / col_groups, col_group = item % col_groups;
    float acc[kMicro][kMicro] = {};
    for (int i = 0; i < depth; ++i) {
      float a_values[kMicro], b_values[kMicro];
#pragma unroll
      for (int u = 0; u < kMicro; ++u) {
        const int r = row_group + u * row_groups;
        a_values[u] = r < rows ? (kTransA ? a[i * lda + r] : a[r * lda + i]) : 0.0f;
        const int c = col_group + u * col_groups;
        b_values[u] = c < cols ? (kTransB ? b[c * ldb + i] : b[i * ldb + c]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kMicro; ++u) {
#pragma unroll
        for (int w = 0; w < kMicro; ++w) acc[u][w] = fmaf(a_values[u], b_values[w], acc[u][w]);
      }
    }
#pragma unroll
    for (int u = 0; u < kMicro; ++u) {
      const int r = row_group + u * row_groups;
      if (r >= rows) continue;
#pragma unroll
      for (int w = 0; w < kMicro; ++w) {
        const int c = col_group + w * col_groups;
        if (c >= cols) continue;
        float value = alpha * acc[u][w];
        if (accumulate) value += (row_scale ? row_scale[r] : 1.0f) * out[r * ldo + c];
        out[r * ldo + c] = value;
      }
    }
  }
}

// tile[rows, D] (leading dimension ld) = the rows [0, valid_rows) of a [., D] matrix whose rows
// are row_stride elements apart, in fp32; rows past valid_rows are zero.
template <class Format>
__device__ inline void load_tile(float* tile, int ld, const Storage<Format>* source,
                                 int64_t row_stride, int valid_rows, int rows, int head_dim) {
  for (int e = threadIdx.x; e < rows * head_dim; e += blockDim.x) {
    const int r = e / head_dim, c = e % head_dim;
    tile[r * ld + c] = r < valid_rows ? Format::to_float(source[r * row_stride + c]) : 0.0f;
  }
}

// The rows [0, valid_rows) of tile[., D] written to a [., D] matrix (row_stride apart).
template <class Format>
__device__ inline void store_tile(Storage<Format>* target, int64_t row_stride, const float* tile,
                                  int ld, int valid_rows, int head_dim) {
  for (int e = threadIdx.x; e < valid_rows * head_dim; e += blockDim.x) {
    const int r = e / head_dim, c = e % head_dim;
    target[r * row_stride + c] = Format::from_float(tile[r * ld + c]);
  }
}

__device__ inline void zero(float* values, int count) {
  for (int e = threadIdx.x; e < count; e += blockDim.x) values[e] = 0.0f;
}

// Sizes shared by the kernels: q[B,T,H,D], k,v[B,T,Hkv,D], lse[B,H,T].
struct AttentionDims {
  int batch, time, heads, kv_heads, head_dim;
  __device__ int group() const { return heads / kv_heads; }
  // Element offset of (b, t=0, head, 0) in q-like and k-like tensors; rows are then
  // heads*D (q) or kv_heads*D (k) elements apart.
  __device__ int64_t q_offset(int b, int head) const {
    return (int64_t{b} * time * heads + head) * head_dim;
  }
  __device__ int64_t kv_offset(int b, int kv_head) const {
    return (int64_t{b} * time * kv_heads + kv_head) * head_dim;
  }
  __device__ int64_t q_stride() const { return int64_t{heads} * head_dim; }
  __device__ int64_t kv_stride() const { return int64_t{kv_heads} * head_dim; }
  __device__ int64_t lse_offset(int b, int head) const { return (int64_t{b} * heads + head) * time; }
};

// The first key that query `query` of row b sees: the start of its sample, query - its
// position (backend.h "positions within packed rows"; positions null: 0). Starts never decrease
// along a row, so a tile's first query has the tile's earliest start.
__device__ inline int sample_start(const int32_t* positions, const AttentionDims& dims, int b,
                                   int query) {
  return positions ? query - positions[int64_t{b} * dims.time + query] : 0;
}

// ---- host side -----------------------------------------------------------------------------

// Allows `kernel` its dynamic shared memory (above the 48 KiB default), or throws naming D.
template <class Kernel>
void allow_shared_memory(const CudaBackendImpl& backend, const char* op, Kernel kernel,
                         size_t bytes, int head_dim) {
  ZT_CHECK(bytes <= backend.max_shared_memory_per_block(), op, ": head dim D = ", head_dim,
           " needs ", bytes, " bytes of shared memory per block; this GPU allows ",
           backend.max_shared_memory_per_block(), " (D <= 128 fits A100 and H100)");
  ZT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
}

// Checks q[B,T,H,D], k,v[B,T,Hkv,D], out (or dout) like q, lse[B,H,T]; one float dtype.
inline AttentionDims check_attention(const char* op, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const char* out_arg,
                                     const Tensor& lse) {
  expect_device_float(op, "q", q);
  expect_device(op, "k", k);
  expect_device(op, "v", v);
  expect_device(op, out_arg, out);
  expect_device(op, "lse", lse, DType::F32);
  expect_same_dtype(op, "k", k, "q", q);
  expect_same_dtype(op, "v", v, "q", q);
  expect_same_dtype(op, out_arg, out, "q", q);
  ZT_CHECK(q.ndim == 4, op, ": q must be [B, T, H, D], got ", q.describe());
  ZT_CHECK(k.ndim == 4, op, ": k must be [B, T, Hkv, D], got ", k.describe());
  const int64_t batch = q.dim(0), time = q.dim(1), heads = q.dim(2), head_dim = q.dim(3);
  const int64_t kv_heads = k.dim(2);
  ZT_CHECK(kv_heads > 0 && heads % kv_heads == 0, op, ": query heads H = ", heads,
           " must be a multiple of key/value heads Hkv = ", kv_heads);
  ZT_CHECK(head_dim > 0, op, ": head dim D must be positive, got ", q.describe());
  expect_shape(op, "k", k, {batch, time, kv_heads, head_dim});
  expect_same_shape(op, "v", v, "k", k);
  expect_same_shape(op, out_arg, out, "q", q);
  expect_shape(op, "lse", lse, {batch, heads, time});
  constexpr int64_t kGridLimit = 65535;
  ZT_CHECK(batch <= kGridLimit && heads <= kGridLimit && time < (int64_t{1} << 30), op,
           ": q ", q.describe(), " exceeds the kernel's grid limits");
  return AttentionDims{static_cast<int>(batch), static_cast<int>(time), static_cast<int>(heads),
                       static_cast<int>(kv_heads), static_cast<int>(head_dim)};
}

inline unsigned int tiles_of(int time, int tile) {
  return static_cast<unsigned int>((time + tile - 1) / tile);
}

}  // namespace zt::cuda::attention
