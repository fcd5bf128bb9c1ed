// Shared pieces of the CUDA backend's attention kernels (cuda_attention_forward.cu,
// cuda_attention_backward.cu): tile sizes, the two ways of multiplying shared-memory tiles (fp32
// on CUDA cores; bf16/fp16 on tensor cores with fp32 accumulation), tile loads/stores, the
// shared-memory layout, the tensor geometry, and the host-side argument checks and
// shared-memory opt-in.
#pragma once
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_wmma.cuh"

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

// The WMMA element type of a 16-bit storage format.
template <class Format>
using WmmaType = std::conditional_t<std::is_same_v<Format, Bf16Format>, __nv_bfloat16, __half>;

// block_gemm's contract on tensor cores: out[rows, cols] (fp32) = alpha op(A) op(B)
// (+ row_scale[r] out[r, c] when accumulating), op(A), op(B) 16-bit in shared memory, products
// summed in fp32. rows, cols and depth are multiples of 16; lda, ldb multiples of 8 and ldo of 4;
// every tile 32-byte aligned (the layouts below make them so). Each warp computes 16x16 output
// tiles in turn, so the whole block must call it (WMMA operations are warp-collective).
template <bool kTransA, bool kTransB, class Format>
__device__ inline void block_mma(float* out, int ldo, const Storage<Format>* a, int lda,
                                 const Storage<Format>* b, int ldb, int rows, int cols, int depth,
                                 float alpha, bool accumulate, const float* row_scale = nullptr) {
  namespace wmma = nvcuda::wmma;
  using T = WmmaType<Format>;
  using LayoutA = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
  using LayoutB = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;
  constexpr int kEdge = 16;
  const T* a_values = reinterpret_cast<const T*>(a);
  const T* b_values = reinterpret_cast<const T*>(b);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x % 32;
  const int tile_cols = cols / kEdge;
  for (int item = warp; item < rows / kEdge * tile_cols; item += warps) {
    const int row0 = item / tile_cols * kEdge, col0 = item % tile_cols * kEdge;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> sum;
    wmma::fill_fragment(sum, 0.0f);
    for (int k = 0; k < depth; k += kEdge) {
      // op(A)(r, i) = kTransA ? a[i * lda + r] : a[r * lda + i], which is A's col_major layout.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> a_tile;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> b_tile;
      wmma::load_matrix_sync(a_tile, a_values + (kTransA ? k * lda + row0 : row0 * lda + k), lda);
      wmma::load_matrix_sync(b_tile, b_values + (kTransB ? col0 * ldb + k : k * ldb + col0), ldb);
      wmma::mma_sync(sum, a_tile, b_tile, sum);
    }
    for (int i = 0; i < sum.num_elements; ++i) sum.x[i] *= alpha;
    float* out_tile = out + row0 * ldo + col0;
    if (accumulate) {
      if (row_scale != nullptr) {
        for (int e = lane; e < kEdge * kEdge; e += 32) {
          out_tile[e / kEdge * ldo + e % kEdge] *= row_scale[row0 + e / kEdge];
        }
        __syncwarp();
      }
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> previous;
      wmma::load_matrix_sync(previous, out_tile, ldo, wmma::mem_row_major);
      for (int i = 0; i < sum.num_elements; ++i) sum.x[i] += previous.x[i];
    }
    wmma::store_matrix_sync(out_tile, sum, ldo, wmma::mem_row_major);
  }
}

// tile[rows, D] (leading dimension ld) = the rows [0, valid_rows) of a [., D] matrix whose rows
// are row_stride elements apart, in fp32; rows past valid_rows are zero.
// As fp32 (CUDA cores) or in the storage format itself (tensor cores).
template <class Format, class Operand>
__device__ inline void load_tile(Operand* tile, int ld, const Storage<Format>* source,
                                 int64_t row_stride, int valid_rows, int rows, int head_dim) {
  for (int e = threadIdx.x; e < rows * head_dim; e += blockDim.x) {
    const int r = e / head_dim, c = e % head_dim;
    if constexpr (std::is_same_v<Operand, float>) {
      tile[r * ld + c] = r < valid_rows ? Format::to_float(source[r * row_stride + c]) : 0.0f;
    } else {
      tile[r * ld + c] = r < valid_rows ? source[r * row_stride + c] : Operand{0};
    }
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

// ---- the two arithmetic paths -------------------------------------------------------------
// A kernel templated on a Math keeps its q/k/v/dO tiles (and the probabilities it multiplies)
// as Math::Operand in shared memory and multiplies them with Math::gemm; softmax, masks and
// accumulators stay fp32 in both.

// fp32 tiles on CUDA cores: every dtype and head dim.
template <class Format>
struct CudaCoreMath {
  using Operand = float;
  static constexpr bool kSeparateProbabilityOperands = false;  // the fp32 tile is the operand
  // Odd leading dimensions: a column walk touches every shared-memory bank once.
  __host__ __device__ static int operand_ld(int cols) { return cols + 1; }
  __host__ __device__ static int accumulator_ld(int cols) { return cols + 1; }
  template <bool kTransA, bool kTransB, int kMicro>
  __device__ static void gemm(float* out, int ldo, const float* a, int lda, const float* b,
                              int ldb, int rows, int cols, int depth, float alpha,
                              bool accumulate, const float* row_scale = nullptr) {
    block_gemm<kTransA, kTransB, kMicro>(out, ldo, a, lda, b, ldb, rows, cols, depth, alpha,
                                         accumulate, row_scale);
  }
};

// 16-bit tiles on tensor cores (bf16/fp16, D a multiple of 16), fp32 accumulation. The
// probabilities are rounded to the dtype before they multiply dO (dV) and their gradients before
// they multiply Q (dK), as FlashAttention does; P V and dS K, whose sums cancel a common
// component of V and K, take them as high + low parts (two products, see low_part).
template <class Format>
struct TensorCoreMath {
  using Operand = Storage<Format>;
  static constexpr bool kSeparateProbabilityOperands = true;
  // Multiples of 8 (WMMA's rule for 16-bit tiles) shifted by 16 bytes per row against bank
  // conflicts; accumulators multiples of 4 (WMMA's rule for float).
  __host__ __device__ static int operand_ld(int cols) { return cols + 8; }
  __host__ __device__ static int accumulator_ld(int cols) { return cols + 4; }
  template <bool kTransA, bool kTransB, int kMicro>
  __device__ static void gemm(float* out, int ldo, const Operand* a, int lda, const Operand* b,
                              int ldb, int rows, int cols, int depth, float alpha,
                              bool accumulate, const float* row_scale = nullptr) {
    block_mma<kTransA, kTransB, Format>(out, ldo, a, lda, b, ldb, rows, cols, depth, alpha,
                                        accumulate, row_scale);
  }
};

// Whether the tensor-core kernels take this dtype and head dim (the dispatcher, cuda_attention.cu,
// decides between cuDNN and these kernels).
inline bool tensor_cores_fit(DType dtype, int head_dim) {
  return (dtype == DType::BF16 || dtype == DType::F16) && head_dim % 16 == 0;
}

// operand[rows, cols] (ld operand_ld) = the fp32 tile as Math::Operand (rounded for 16-bit).
template <class Format, class Operand>
__device__ inline void to_operand(Operand* operand, int operand_ld, const float* tile, int ld,
                                  int rows, int cols) {
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    if constexpr (std::is_same_v<Operand, float>) {
      operand[r * operand_ld + c] = tile[r * ld + c];
    } else {
      operand[r * operand_ld + c] = Format::from_float(tile[r * ld + c]);
    }
  }
}

// low[rows, cols] = (tile - high) rounded: with high = the tile as an operand (to_operand), the
// pair holds each value to about twice the dtype's bits (16-bit operands only).
template <class Format, class Operand>
__device__ inline void low_part(Operand* low, const Operand* high, int operand_ld, const float* tile,
                                int ld, int rows, int cols) {
  for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    low[r * operand_ld + c] = Format::from_float(tile[r * ld + c] - Format::to_float(high[r * operand_ld + c]));
  }
}

// A kernel's dynamic shared memory cut into 32-byte aligned arrays (WMMA's alignment), the
// same on the host (to size the launch) and the device: take<T>(count) returns the next array.
class SharedLayout {
 public:
  __host__ __device__ explicit SharedLayout(void* base)
      : base_(static_cast<char*>(base)), offset_(0) {}
  template <class T>
  __host__ __device__ T* take(size_t count) {
    offset_ = (offset_ + 31) / 32 * 32;
    T* array = reinterpret_cast<T*>(base_ + offset_);
    offset_ += count * sizeof(T);
    return array;
  }
  // The bytes a launch asks for: the arrays plus the slack to align the base itself.
  __host__ __device__ size_t launch_bytes() const { return offset_ + 32; }
  // The base rounded up to 32 bytes (dynamic shared memory is only 16-byte aligned).
  __host__ __device__ static void* aligned(void* base) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + 31) / 32 * 32);
  }

 private:
  char* base_;
  size_t offset_;
};

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

namespace zt::cuda {
// Our own kernels (cuda_attention_forward.cu, cuda_attention_backward.cu) on tensor cores or CUDA
// cores, arguments checked by the dispatcher (cuda_attention.cu); positions: device int32[B*T] or
// null.
void run_attention_forward_kernels(CudaBackendImpl& backend, bool tensor_cores, Tensor out,
                                   Tensor lse, Tensor q, Tensor k, Tensor v,
                                   const int32_t* positions, const attention::AttentionDims& dims,
                                   float scale);
void run_attention_backward_kernels(CudaBackendImpl& backend, bool tensor_cores, Tensor dq,
                                    Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                                    Tensor out, Tensor lse, const int32_t* positions,
                                    const attention::AttentionDims& dims, float scale);
}  // namespace zt::cuda
