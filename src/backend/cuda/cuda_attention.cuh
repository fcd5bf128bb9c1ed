// Shared pieces of the CUDA backend's attention kernels (cuda_attention_forward.cu,
// cuda_attention_backward.cu): tile sizes; the CUDA-core path's fp32 block GEMM and tile
// loads/stores; the tensor-core path's warp-level pieces (WMMA fragments in registers, 16-byte
// tile copies, double buffering through registers); the shared-memory layout, the tensor
// geometry, and the host-side argument checks and shared-memory opt-in.
#pragma once
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_wmma.cuh"

namespace zt::cuda::attention {

template <class Format>
using Storage = typename Format::Storage;

// The CUDA-core kernels' tiles. Forward: 64 queries x 64 keys, 256 threads. Backward: 32 x 32,
// 128 threads (its kernels hold six D-wide tiles in shared memory). The tensor-core kernels'
// tiles are below (kTcBlockRows and the rest).
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

// ---- the CUDA-core path ----------------------------------------------------------------------
// The CUDA-core kernels (templated on a Math) keep their q/k/v/dO tiles, the probabilities and
// the accumulators as fp32 in shared memory and multiply them with Math::gemm.

// fp32 tiles on CUDA cores: every dtype and head dim.
template <class Format>
struct CudaCoreMath {
  using Operand = float;
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

// Whether the tensor-core kernels take this dtype and head dim (the dispatcher, cuda_attention.cu,
// decides between cuDNN and these kernels). Their register tiles are sized at compile time per
// head dim (kMaxTensorCoreHeadDim bounds the accumulators a warp holds); larger heads go to the
// CUDA cores.
constexpr int kMaxTensorCoreHeadDim = 128;
inline bool tensor_cores_fit(DType dtype, int head_dim) {
  return (dtype == DType::BF16 || dtype == DType::F16) && head_dim % 16 == 0 &&
         head_dim <= kMaxTensorCoreHeadDim;
}

// ---- the tensor-core path (bf16/fp16, D a multiple of 16 up to 128) ------------------------
// FlashAttention-2's work split: every warp owns 16 rows (queries, or keys for dK/dV) and keeps
// their fp32 accumulators in registers (WMMA fragments) across the whole loop; the block shares
// only the 16-bit K/V (or Q/dO) tiles it streams through shared memory, double-buffered. A
// warp's scores go through a warp-private fp32 scratch tile (the softmax needs whole rows, and
// CUDA does not specify which lane holds which accumulator element), its probabilities through
// a warp-private 16-bit operand tile; neither needs a block barrier.

// The WMMA element type of a 16-bit storage format.
template <class Format>
using WmmaType = std::conditional_t<std::is_same_v<Format, Bf16Format>, __nv_bfloat16, __half>;

namespace wmma = nvcuda::wmma;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <class T>
using OperandA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T, class Layout>
using OperandB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;

constexpr int kWarpRows = 16;                       // the rows a warp owns
constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;           // 128
constexpr int kTcBlockRows = kWarpRows * kTcWarps;  // 64 rows a block owns
constexpr int kTcForwardKeys = 64;                  // forward key tile
constexpr int kTcBackwardTile = 32;                 // backward streamed tile (queries or keys)

// Leading dimensions: 16-bit tiles are padded by 8 elements (WMMA wants multiples of 8; the 16
// bytes shift each row by 4 banks, so the 8 rows of a fragment load hit different banks), fp32
// scratch by 4 (WMMA's multiple of 4 for float).
constexpr int operand_ld(int cols) { return cols + 8; }
constexpr int scratch_ld(int cols) { return cols + 4; }
constexpr int round_up_32(int bytes) { return (bytes + 31) / 32 * 32; }

// 8 16-bit values: one 16-byte load or store (LDG.128 / STS.128 when aligned).
struct alignas(16) Vector16 {
  uint32_t words[4];
};

// tile[rows, kD] (leading dimension ld, 16-bit) = rows [0, valid_rows) of a matrix whose rows
// are row_stride elements apart, zero past valid_rows, in 16-byte vectors; `worker` of
// `workers` threads share the copy (a warp: lane of 32; a block: threadIdx.x of blockDim.x).
template <int kD>
__device__ inline void copy_rows(uint16_t* tile, int ld, const uint16_t* source,
                                 int64_t row_stride, int valid_rows, int rows, int worker,
                                 int workers) {
  constexpr int kVectorsPerRow = kD / 8;
  for (int e = worker; e < rows * kVectorsPerRow; e += workers) {
    const int r = e / kVectorsPerRow, c = e % kVectorsPerRow * 8;
    Vector16 value{};
    if (r < valid_rows) value = *reinterpret_cast<const Vector16*>(source + r * row_stride + c);
    *reinterpret_cast<Vector16*>(tile + r * ld + c) = value;
  }
}

// A block's [kRows, kD] 16-bit tile on its way from global to shared memory through registers:
// fetch() issues the 16-byte loads, commit() stores them, so the kernel computes on the current
// tile while the next one is in flight (double buffering without cp.async, which the emulated
// device does not implement). Rows past valid_rows are zero.
template <int kRows, int kD>
struct TileStage {
  static constexpr int kVectorsPerRow = kD / 8;
  static constexpr int kVectors = kRows * kVectorsPerRow;
  static constexpr int kPerThread = (kVectors + kTcThreads - 1) / kTcThreads;
  Vector16 values[kPerThread];

  __device__ void fetch(const uint16_t* source, int64_t row_stride, int valid_rows) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kTcThreads;
      const int r = e / kVectorsPerRow, c = e % kVectorsPerRow * 8;
      values[i] = Vector16{};
      if (e < kVectors && r < valid_rows) {
        values[i] = *reinterpret_cast<const Vector16*>(source + r * row_stride + c);
      }
    }
  }
  __device__ void commit(uint16_t* tile, int ld) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kTcThreads;
      const int r = e / kVectorsPerRow, c = e % kVectorsPerRow * 8;
      if (e < kVectors) *reinterpret_cast<Vector16*>(tile + r * ld + c) = values[i];
    }
  }
};

// Which row of its 16x16 tile each of this lane's accumulator elements is in: element i is in
// row[i].
// CUDA leaves that mapping unspecified (it differs between GPU generations, and the emulated
// device has its own), so it is read off a tile whose elements are their own indices, loaded
// with load_matrix_sync: documented behaviour everywhere. Every accumulator fragment of a
// warp has the same mapping (element-wise arithmetic between fragments relies on it too).
struct FragmentCoordinates {
  int row[Accumulator::num_elements];
};

// scratch: a warp-private [16, 16] fp32 area, 32-byte aligned.
__device__ inline FragmentCoordinates fragment_coordinates(float* scratch) {
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 16 * 16; e += 32) scratch[e] = static_cast<float>(e);
  __syncwarp();
  Accumulator indices;
  wmma::load_matrix_sync(indices, scratch, 16, wmma::mem_row_major);
  FragmentCoordinates at;
#pragma unroll
  for (int i = 0; i < Accumulator::num_elements; ++i) {
    at.row[i] = static_cast<int>(indices.x[i]) / 16;
  }
  __syncwarp();  // every lane has read scratch before the warp reuses it
  return at;
}

// acc[kCols] ([16, 16 kCols] fp32) += A[16, kDepth] B[kDepth, 16 kCols] on tensor cores, A
// row-major at a (lda), B in shared memory: row-major (b[i * ldb + c]) or, with
// kTransB, the transpose of a row-major tile (b[c * ldb + i]: B = tile^T, WMMA's col_major).
template <int kDepth, int kCols, bool kTransB, class T>
__device__ inline void warp_mma(Accumulator (&acc)[kCols], const T* a, int lda, const T* b,
                                int ldb) {
  using Layout = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;
#pragma unroll
  for (int k = 0; k < kDepth; k += 16) {
    OperandA<T> a_tile;
    wmma::load_matrix_sync(a_tile, a + k, lda);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      OperandB<T, Layout> b_tile;
      wmma::load_matrix_sync(b_tile, kTransB ? b + c * 16 * ldb + k : b + k * ldb + c * 16, ldb);
      wmma::mma_sync(acc[c], a_tile, b_tile, acc[c]);
    }
  }
}

// acc[kCols] ([16, 16 kCols] fp32) += (A_high + A_low)[16, kDepth] B[kDepth, 16 kCols], B
// row-major: a value split into two 16-bit parts (high = the value rounded, low = the rest
// rounded) keeps about 16 bits, where one rounding would leave a bias in sums that cancel (see
// the kernels). Each B fragment is loaded once and used for both parts, so the second product
// costs tensor-core time but no B traffic.
template <int kDepth, int kCols, class T>
__device__ inline void warp_mma_split(Accumulator (&acc)[kCols], const T* a_high, const T* a_low,
                                      int lda, const T* b, int ldb) {
#pragma unroll
  for (int k = 0; k < kDepth; k += 16) {
    OperandA<T> high, low;
    wmma::load_matrix_sync(high, a_high + k, lda);
    wmma::load_matrix_sync(low, a_low + k, lda);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      OperandB<T, wmma::row_major> b_tile;
      wmma::load_matrix_sync(b_tile, b + k * ldb + c * 16, ldb);
      wmma::mma_sync(acc[c], high, b_tile, acc[c]);
      wmma::mma_sync(acc[c], low, b_tile, acc[c]);
    }
  }
}

template <int kCount>
__device__ inline void zero_fragments(Accumulator (&acc)[kCount]) {
#pragma unroll
  for (int f = 0; f < kCount; ++f) wmma::fill_fragment(acc[f], 0.0f);
}

// acc[f] (a warp's [16, 16 kCount] fp32 rows) *= factor[row] (factor: warp-private [16]).
template <int kCount>
__device__ inline void scale_rows(Accumulator (&acc)[kCount], const float* factor,
                                  const FragmentCoordinates& at) {
#pragma unroll
  for (int i = 0; i < Accumulator::num_elements; ++i) {
    const float f = factor[at.row[i]];
#pragma unroll
    for (int c = 0; c < kCount; ++c) acc[c].x[i] *= f;
  }
}

// Rows [0, valid_rows) of a warp's [16, kD] fp32 accumulators written to a 16-bit matrix (rows
// row_stride apart) in 16-byte vectors, through the warp's scratch [16, kScratchCols] in pieces
// of kScratchCols columns.
template <class Format, int kD, int kScratchCols>
__device__ inline void store_warp_rows(Storage<Format>* target, int64_t row_stride,
                                       const Accumulator (&acc)[kD / 16], float* scratch,
                                       int valid_rows) {
  constexpr int kLd = scratch_ld(kScratchCols);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c0 = 0; c0 < kD; c0 += kScratchCols) {
    const int width = kD - c0 < kScratchCols ? kD - c0 : kScratchCols;
#pragma unroll
    for (int f = c0 / 16; f < (c0 + width) / 16; ++f) {
      wmma::store_matrix_sync(scratch + (f * 16 - c0), acc[f], kLd, wmma::mem_row_major);
    }
    __syncwarp();
    const int vectors_per_row = width / 8;
    for (int e = lane; e < kWarpRows * vectors_per_row; e += 32) {
      const int r = e / vectors_per_row, c = e % vectors_per_row * 8;
      if (r >= valid_rows) continue;
      Vector16 value;
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // element 2w in the low half (little-endian order)
        const uint32_t low = Format::from_float(scratch[r * kLd + c + 2 * w]);
        const uint32_t high = Format::from_float(scratch[r * kLd + c + 2 * w + 1]);
        value.words[w] = low | high << 16;
      }
      *reinterpret_cast<Vector16*>(target + r * row_stride + c0 + c) = value;
    }
    __syncwarp();  // scratch is read before the next piece overwrites it
  }
}

// Calls body(std::integral_constant<int, D>) for the head dims the tensor-core kernels are
// compiled for (tensor_cores_fit).
template <class Body>
void with_head_dim(int head_dim, Body&& body) {
  switch (head_dim) {
    case 16: return body(std::integral_constant<int, 16>{});
    case 32: return body(std::integral_constant<int, 32>{});
    case 48: return body(std::integral_constant<int, 48>{});
    case 64: return body(std::integral_constant<int, 64>{});
    case 80: return body(std::integral_constant<int, 80>{});
    case 96: return body(std::integral_constant<int, 96>{});
    case 112: return body(std::integral_constant<int, 112>{});
    case 128: return body(std::integral_constant<int, 128>{});
    default: fail("attention: no tensor-core kernel for head dim ", head_dim);
  }
}

// Whether every tensor's data is 16-byte aligned (the tensor-core kernels' vector accesses).
inline bool vector_aligned(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  }
  return true;
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
  const auto [batch, time, heads, kv_heads, head_dim] = attention_shape(op, q, k, v, out, out_arg, lse);
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
