// Shared pieces of the CUDA backend's attention kernels (cuda_attention_forward.cu,
// cuda_attention_backward.cu): tile sizes; the CUDA-core path's fp32 block GEMM and tile
// loads/stores; the tensor-core path's warp-level pieces (mma.sync fragments in registers,
// 16-byte tile copies, asynchronous double buffering); the shared-memory layout, the tensor
// geometry, and the host-side argument checks and shared-memory opt-in.
#pragma once
#include <cfloat>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_async_copy.cuh"
#include "backend/cuda/cuda_mma.cuh"

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
// FlashAttention-2's work split: every warp owns its rows and keeps their fp32 accumulators in
// registers across the whole loop. In the forward and dQ a warp owns 32 queries, as two row tiles
// that share each operand the warp loads; the block shares the 16-bit K and V tiles it streams
// through shared memory, double-buffered, and its own rows' tiles (the warps load their operands
// from them). The products are PTX's mma.sync m16n8k16 on operands that ldmatrix loads
// (backend/cuda/cuda_mma.cuh): their fragment layouts are documented, so a warp's scores stay in
// registers, each lane runs the softmax on the elements it holds (4 lanes share a row), and the
// probabilities go straight back into the next product as its A operand, with no barrier but the
// block's one per streamed tile. dK/dV (cuda_attention_backward.cu) owns 32 keys and half of D a
// warp, and its warps exchange P^T and dS^T through shared memory, as FlashAttention-2's backward.

// The mma element type of a 16-bit storage format.
template <class Format>
using MmaType = std::conditional_t<std::is_same_v<Format, Bf16Format>, __nv_bfloat16, __half>;

constexpr int kWarpRows = 16;                       // a row tile: the rows of one mma
constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;           // 128
constexpr int kTcBlockRows = kWarpRows * kTcWarps;  // 64 keys a dK/dV block owns
// The query-side kernels, the forward (cuda_attention_forward.cu) and dQ (cuda_attention_backward.cu):
// a warp owns two row tiles (32 queries), which share each K and V operand it loads, so a block
// owns 128 queries, two blocks an SM (dQ's on an H100; an A100 fits one at D 96 and 128). At
// D 112, which no family uses, two row tiles spill (4-24 bytes, CUDA 13's ptxas) and a warp
// keeps one (64-query blocks).
constexpr int tc_query_row_tiles(int head_dim) { return head_dim == 112 ? 1 : 2; }
constexpr int tc_query_rows(int head_dim) { return kWarpRows * tc_query_row_tiles(head_dim) * kTcWarps; }
constexpr int kTcForwardKeys = 32;
constexpr int kTcBackwardTile = 32;                 // dQ's streamed key tile
constexpr int kTcDkdvQueries = 64;                  // dK/dV's streamed query tile

// 16-bit tiles are padded by 8 elements: the 16 bytes shift each row by 4 banks, so the 8 rows
// an ldmatrix phase reads (16 bytes each) hit all 32 banks once.
constexpr int operand_ld(int cols) { return cols + 8; }

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

// Row r, column c of a 16-bit tile (ld) from a matrix whose rows are row_stride elements apart:
// one 16-byte asynchronous copy, or zeros (a plain store) from valid_rows on.
__device__ inline void copy_or_zero_16(uint16_t* tile, int ld, const uint16_t* source, int64_t row_stride,
                                       int valid_rows, int r, int c) {
  if (r < valid_rows) {
    async_copy_16(tile + r * ld + c, source + r * row_stride + c);
  } else {
    *reinterpret_cast<Vector16*>(tile + r * ld + c) = Vector16{};
  }
}

// tile[kRows, kD] (leading dimension ld, 16-bit) = rows [0, valid_rows) of a matrix whose rows
// are row_stride elements apart, zero past valid_rows, copied by the block's threads
// asynchronously (16-byte cp.async copies; the zero rows are plain stores). The caller commits
// the group, and waits for it and meets at a barrier before anyone reads the tile: the kernels
// issue the next tile's copies, compute on the current one meanwhile, then wait. The copies a
// thread makes are counted at compile time (kCopies), so the loop unrolls without a remainder
// and each copy's row and column are shifts of the thread index where kVectorsPerRow divides
// the block: with a count known only at run time (a loop to the tile's end) the address
// arithmetic had been a third of the forward's loop (ptxas, sm_90, D 128, the 16-row forward
// of 2026-11-29: 855 instructions a 32-key tile, 605 after).
template <int kRows, int kD>
__device__ inline void copy_tile_async(uint16_t* tile, int ld, const uint16_t* source,
                                       int64_t row_stride, int valid_rows) {
  constexpr int kVectorsPerRow = kD / 8;
  constexpr int kVectors = kRows * kVectorsPerRow;
  constexpr int kCopies = (kVectors + kTcThreads - 1) / kTcThreads;  // per thread, at most
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * kTcThreads;
    if (kVectors % kTcThreads != 0 && e >= kVectors) break;
    copy_or_zero_16(tile, ld, source, row_stride, valid_rows, e / kVectorsPerRow, e % kVectorsPerRow * 8);
  }
}

// The same copy with each thread's column fixed: it copies one 16-byte column of every
// kRowsPerPass-th row from its own first row (where the columns don't divide the block, its last
// threads idle). copy_tile_async's column moves from copy to copy at D 48, 80, 96 and 112, and
// the compiler keeps each copy's offset in a register across a loop: the dK/dV kernel, which
// copies Q and dO at two places in its loop, spilled them at D 112 (sm_80). The forward, whose
// registers are allocated the other way round, spills with this one (D 96 and 128, 8 bytes).
template <int kRows, int kD>
__device__ inline void copy_tile_async_by_column(uint16_t* tile, int ld, const uint16_t* source,
                                                 int64_t row_stride, int valid_rows) {
  constexpr int kVectorsPerRow = kD / 8;
  constexpr int kRowsPerPass = kTcThreads / kVectorsPerRow;
  constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  const int thread = static_cast<int>(threadIdx.x);
  if (kRowsPerPass * kVectorsPerRow < kTcThreads && thread >= kRowsPerPass * kVectorsPerRow) return;
  const int first_row = thread / kVectorsPerRow, c = thread % kVectorsPerRow * 8;
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = first_row + i * kRowsPerPass;
    if (kRows % kRowsPerPass != 0 && r >= kRows) break;
    copy_or_zero_16(tile, ld, source, row_stride, valid_rows, r, c);
  }
}

// Two tiles of the same rows (K and V, or Q and dO) copied asynchronously as one group.
template <int kRows, int kD>
__device__ inline void copy_tile_pair_async(uint16_t* first_tile, uint16_t* second_tile, int ld,
                                            const uint16_t* first, const uint16_t* second,
                                            int64_t row_stride, int valid_rows) {
  copy_tile_async<kRows, kD>(first_tile, ld, first, row_stride, valid_rows);
  copy_tile_async<kRows, kD>(second_tile, ld, second, row_stride, valid_rows);
  async_copy_commit();
}

// A warp's [16, 8 kN] fp32 tile is kN mma accumulators, float c[kN][4]: with g = lane / 4 and
// t = lane % 4, c[j][e] is row g + 8 (e / 2), column 8 j + 2 t + e % 2 (emu/emu_mma.h).
__device__ inline int fragment_row(int e) { return static_cast<int>(threadIdx.x) % 32 / 4 + 8 * (e / 2); }
__device__ inline int fragment_col(int j, int e) {
  return 8 * j + 2 * (static_cast<int>(threadIdx.x) % 4) + e % 2;
}

template <int kN>
__device__ inline void zero_fragments(float (&c)[kN][4]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) c[j][e] = 0.0f;
  }
}

// This lane's ldmatrix row address for the A operand of a [16, .] row-major tile (ld): rows
// 0-7 and 8-15 of the step's first 8 columns, then of its last 8 (a0 .. a3).
__device__ inline const uint16_t* a_operand_row(const uint16_t* tile, int ld) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  return tile + (lane % 16) * ld + (lane / 16) * 8;
}

// c[m][kN] ([16, 8 kN] each) += A_m [16, 16] rows^T [16, 8 kN] for one k step, for kM row tiles
// that share each B operand (the forward's warp owns 32 rows: one ldmatrix serves both): `rows`
// is a row-major [8 kN, .] tile (ld) whose columns [k0, k0 + 16) are the step's depth, so B(k, n)
// = rows[n][k0 + k] (S = Q K^T with K's rows). One ldmatrix gives two n-tiles' B: matrices 0, 1
// are rows 8 j .. + 7 at columns k0 and k0 + 8, matrices 2, 3 the next 8 rows.
template <class T, int kM, int kN>
__device__ inline void mma_step_bt(float (&c)[kM][kN][4], const uint32_t (&a)[kM][4], const uint16_t* rows,
                                   int ld, int k0) {
  static_assert(kN % 2 == 0, "n-tiles go in pairs");
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const uint16_t* row = rows + (lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * (lane / 8 % 2);
#pragma unroll
  for (int j = 0; j < kN; j += 2) {
    uint32_t b[4];
    zt_mma::ldmatrix_x4(b, row + 8 * j * ld);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      zt_mma::mma_m16n8k16<T>(c[m][j], a[m], b[0], b[1]);
      zt_mma::mma_m16n8k16<T>(c[m][j + 1], a[m], b[2], b[3]);
    }
  }
}

// step(a, k0) for each k step of a warp's own [16 kM, kDepth] row-major A tile in shared memory
// (lda; row tile m its rows [16 m, 16 m + 16)), a[kM][4] that step's operands, loaded one k step
// at a time.
template <int kDepth, int kM, class Step>
__device__ inline void for_each_shared_a_step(const uint16_t* a_tile, int lda, Step&& step) {
  const uint16_t* a_row = a_operand_row(a_tile, lda);
#pragma unroll
  for (int kk = 0; kk < kDepth / 16; ++kk) {
    uint32_t a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) zt_mma::ldmatrix_x4(a[m], a_row + 16 * m * lda + 16 * kk);
    step(a, 16 * kk);
  }
}

// c[m][kN] ([16, 8 kN] each) += A_m [16, kDepth] rows^T, rows a row-major [8 kN, kDepth] tile
// (ld); A a warp's own [16 kM, kDepth] row-major tile in shared memory (lda), row tile m its
// rows [16 m, 16 m + 16).
template <class T, int kDepth, int kM, int kN>
__device__ inline void mma_shared_a_bt(float (&c)[kM][kN][4], const uint16_t* a_tile, int lda,
                                       const uint16_t* rows, int ld) {
  for_each_shared_a_step<kDepth, kM>(a_tile, lda, [&](const uint32_t (&a)[kM][4], int k0) {
    mma_step_bt<T>(c, a, rows, ld, k0);
  });
}

// c[m][kN] ([16, 8 kN] each) += A_m [16, 16] B for one k step and kM row tiles sharing each B
// operand: B is the rows [k0, k0 + 16) of a row-major [., 8 kN] tile b (ld) (P V with V's rows),
// loaded transposed: matrices 0, 1 are rows k0 .. + 7 and k0 + 8 .. + 15 at columns 8 j,
// matrices 2, 3 the same at 8 j + 8.
template <class T, int kM, int kN>
__device__ inline void mma_step_b(float (&c)[kM][kN][4], const uint32_t (&a)[kM][4], const uint16_t* b, int ld,
                                  int k0) {
  static_assert(kN % 2 == 0, "n-tiles go in pairs");
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const uint16_t* row = b + (k0 + lane % 8 + 8 * (lane / 8 % 2)) * ld + 8 * (lane / 16);
#pragma unroll
  for (int j = 0; j < kN; j += 2) {
    uint32_t bt[4];
    zt_mma::ldmatrix_x4_trans(bt, row + 8 * j);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      zt_mma::mma_m16n8k16<T>(c[m][j], a[m], bt[0], bt[1]);
      zt_mma::mma_m16n8k16<T>(c[m][j + 1], a[m], bt[2], bt[3]);
    }
  }
}

// c[m][kN] ([16, 8 kN] each) += A_m [16, kDepth] B for kM row tiles, A a warp's own [16 kM,
// kDepth] row-major tile in shared memory (lda; row tile m its rows [16 m, 16 m + 16)), B a
// row-major [kDepth, 8 kN] tile b (ldb), each of its operands serving the kM row tiles.
template <class T, int kDepth, int kM, int kN>
__device__ inline void mma_shared_a_b(float (&c)[kM][kN][4], const uint16_t* a_tile, int lda, const uint16_t* b,
                                      int ldb) {
  for_each_shared_a_step<kDepth, kM>(a_tile, lda, [&](const uint32_t (&a)[kM][4], int k0) {
    mma_step_b<T>(c, a, b, ldb, k0);
  });
}

// Two fp32 values rounded to the dtype in one register, the first in the low half (the order
// of an operand's columns).
template <class Format>
__device__ inline uint32_t pack_pair(float first, float second) {
  return uint32_t{Format::from_float(first)} | uint32_t{Format::from_float(second)} << 16;
}

// pack_pair's register and the values it holds, widened back to fp32: the kernels that need the
// rounded values (the forward's sum of the weights P V takes, dQ's rounding residue) round once.
template <class Format>
__device__ inline uint32_t pack_pair_rounded(float first, float second, float& first_rounded, float& second_rounded) {
  const uint32_t pair = pack_pair<Format>(first, second);
  first_rounded = Format::to_float(static_cast<uint16_t>(pair & 0xFFFFu));
  second_rounded = Format::to_float(static_cast<uint16_t>(pair >> 16));
  return pair;
}

// Where k step kk's A operand register r (a0 .. a3) takes an accumulator pair from: columns 2t,
// 2t + 1 of n-tile 2 kk + r / 2, row g + 8 (r % 2). A kernel that packs its accumulators itself
// puts the pair of n-tile j, row half h (g, g + 8) at operand[j / 2][a_register(j, h)].
__device__ constexpr int a_register(int j, int h) { return 2 * (j % 2) + h; }

// c[m][kDN] ([16, 8 kDN] each) += A_m [16, 16 kK] B for kM row tiles, A_m given as its packed
// operands a[m][kk] (k step kk; P or dS, rounded by the kernel), B a row-major [16 kK, 8 kDN] tile
// b (ld) in shared memory (V or K), each of its operands serving the kM row tiles.
template <class T, int kM, int kK, int kDN>
__device__ inline void mma_operands_b(float (&c)[kM][kDN][4], const uint32_t (&a)[kM][kK][4], const uint16_t* b,
                                      int ld) {
#pragma unroll
  for (int kk = 0; kk < kK; ++kk) {
    uint32_t step[kM][4];  // (register names: no copy)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int r = 0; r < 4; ++r) step[m][r] = a[m][kk][r];
    }
    mma_step_b<T>(c, step, b, ld, 16 * kk);
  }
}

// Rows [0, valid_rows) of a warp's [16, 8 kN] fp32 accumulators, row g times factor[0] and row
// g + 8 times factor[1], rounded to a 16-bit matrix whose rows are row_stride apart: each lane
// writes its column pairs (4-byte stores).
// From n-tile first_tile on when given (columns 8 first_tile ..; the earlier ones another warp
// stores).
template <class Format, int kN>
__device__ inline void store_fragments(Storage<Format>* target, int64_t row_stride,
                                       const float (&c)[kN][4], const float (&factor)[2],
                                       int valid_rows, int first_tile = 0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = fragment_row(2 * h);
    if (row >= valid_rows) continue;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      if (j < first_tile) continue;
      *reinterpret_cast<uint32_t*>(target + row * row_stride + fragment_col(j, 0)) =
          pack_pair<Format>(c[j][2 * h] * factor[h], c[j][2 * h + 1] * factor[h]);
    }
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

// A kernel's dynamic shared memory cut into 32-byte aligned arrays (ldmatrix needs 16), the
// same on the host (to size the launch) and the device: take<T>(count) returns the next array.
// On the device every array is the base plus an offset (pointer arithmetic, never through an
// integer), so the compiler sees that it is shared memory: plain loads and stores of the tiles
// become LDS/STS, and ldmatrix's and cp.async's address conversions fold away, where an address
// that went through an integer took generic LD/ST.
class SharedLayout {
 public:
  // base nullptr: a layout that only counts the bytes (the host's launch size), with no
  // arithmetic on the null pointer.
  __host__ __device__ explicit SharedLayout(void* base) : base_(static_cast<char*>(base)), offset_(0) {}
  template <class T>
  __host__ __device__ T* take(size_t count) {
    offset_ = (offset_ + 31) / 32 * 32;
#if defined(__CUDA_ARCH__)
    T* array = reinterpret_cast<T*>(base_ + offset_);  // (a kernel's base is never null)
#else
    T* array = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
#endif
    offset_ += count * sizeof(T);
    return array;
  }
  // The bytes a launch asks for: the arrays plus the slack to align the base itself.
  __host__ __device__ size_t launch_bytes() const { return offset_ + 32; }
  // The base rounded up to 32 bytes (dynamic shared memory is only 16-byte aligned).
  __host__ __device__ static void* aligned(void* base) {
    char* bytes = static_cast<char*>(base);
    return bytes + (32 - reinterpret_cast<uintptr_t>(bytes) % 32) % 32;
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

// The tensor-core kernels take exponentials base 2: e^(scale s - m) = 2^(s scale log2(e) - m log2(e)),
// one fused multiply-add and the hardware's ex2 per element (expf takes several instructions
// more). The lse they write and read stays the natural log, as the other kernels' and cuDNN's.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// 2^x by the hardware's ex2 alone, results below 2^-126 flushed to zero (PTX ex2.approx.ftz,
// relative error within 2^-22): exp2f without -ftz wraps the same instruction in a rescaling
// that keeps subnormal results, four instructions more an element (ptxas, sm_90: 80 of the
// 16-row forward's 605 a tile went to 16 exponentials, 2026-11-29). A probability under 2^-126
// of its row's largest adds nothing a 16-bit P or an fp32 sum can hold. 2^-inf = 0 (masked keys).
__device__ inline float exp2_flushed(float x) {
#if defined(ZT_CUDA_EMULATE)
  const float y = exp2f(x);
  return y < FLT_MIN ? 0.0f : y;
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// Whether query `query` (of sample start `start`; past T a start past every key) sees every key
// of [first_key, first_key + keys): the tile needs no mask for that row.
__device__ inline bool sees_whole_tile(int query, int start, int first_key, int keys) {
  return first_key + keys - 1 <= query && first_key >= start;
}

// s[kN][4] ([16, 8 kN] scores of a row tile whose first column is key first_key) at -inf where
// the lane's row (rows[e / 2]: g, then g + 8; any type with a query and a start, the start
// past every key for a row past T) does not see the key: a future key, an earlier sample's key,
// or a row past T.
template <class Row, int kN>
__device__ inline void mask_tile(const Row (&rows)[2], float (&s)[kN][4], int first_key) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const Row& my = rows[e / 2];
      const int key = first_key + fragment_col(j, e);
      if (!(key <= my.query && key >= my.start)) s[j][e] = -INFINITY;
    }
  }
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

// The grid of our kernels: one block per (tile, head, sample), longest first within each sample.
// The tile is the middle index (y) and the head the fastest (x), so the first waves take every
// head's longest tiles and the short ones fill the last (the samples, z, one after another: the
// tail is the last sample's short tiles). With the tile fastest, each head's tiles went out
// longest first but the heads one after another, so the last wave held long tiles too (ncu on
// an H200, 2026-11-28: a partial wave of up to a quarter of the forward's and the backward's
// time). Blocks go out in linear index order in practice; speed relies on it, results do not.
inline dim3 tile_grid(const char* op, int time, int tile_rows, int heads, int batch) {
  const unsigned int tiles = tiles_of(time, tile_rows);
  ZT_CHECK(tiles <= 65535u, op, ": ", time, " tokens make ", tiles, " tiles of ", tile_rows,
           " rows, over the grid's limit of 65535");
  return dim3(static_cast<unsigned int>(heads), tiles, static_cast<unsigned int>(batch));
}

// A block's place in tile_grid: order 0 is the first tile row (the kernel maps it to its longest
// tile), head (or kv head, for a grid over kv heads) and sample.
struct BlockTile {
  int order, head, b;
};
__device__ inline BlockTile block_tile() {
  return {static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.z)};
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
