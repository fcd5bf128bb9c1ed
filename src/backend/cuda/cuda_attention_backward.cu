// The CUDA backend's causal grouped-query attention, backward, in the FlashAttention-2 manner:
// the probabilities are recomputed tile by tile from the saved log-sum-exp. Deterministic
// without atomics: one kernel computes dK/dV with one block per (32-key tile, kv head, batch),
// looping over the query heads of its group and the query tiles in a fixed order; another
// computes dQ with one block per (32-query tile, head, batch) looping over key tiles. Each block
// owns the rows it writes. bf16/fp16 with D a multiple of 16 (up to 128) run the tensor-core
// kernels (blocks of 64 keys and 128 queries, each warp's accumulators in registers), everything
// else the CUDA-core ones (32-row tiles in fp32, CudaCoreMath), as the forward.
#include "backend/buffer.h"
#include "backend/cuda/cuda_attention.cuh"

namespace zt::cuda {

namespace {

using namespace attention;

// delta[b, h, t] = sum_d dout[b,t,h,d] * out[b,t,h,d] (= rowsum(P * dP)), one warp per row.
template <class Format>
__global__ void attention_delta_kernel(float* delta, const Storage<Format>* dout,
                                       const Storage<Format>* out, AttentionDims dims) {
  const int64_t rows = int64_t{dims.batch} * dims.time * dims.heads;  // (b, t, h) order
  const int lane = threadIdx.x % 32;
  for (int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; row < rows;
       row += int64_t{gridDim.x} * blockDim.x / 32) {
    const Storage<Format>* dout_row = dout + row * dims.head_dim;  // [D]
    const Storage<Format>* out_row = out + row * dims.head_dim;    // [D]
    float dot = 0.0f;
    for (int d = lane; d < dims.head_dim; d += 32) {
      dot += Format::to_float(dout_row[d]) * Format::to_float(out_row[d]);
    }
    dot = warp_sum(dot);
    if (lane == 0) {
      const int64_t head = row % dims.heads, t = row / dims.heads % dims.time;
      const int64_t b = row / (int64_t{dims.heads} * dims.time);
      delta[(b * dims.heads + head) * dims.time + t] = dot;
    }
  }
}

// The tiles of one (query tile, key tile) step of both backward kernels, and where each kernel
// keeps its own: q/dO/k/v operand tiles, two fp32 accumulators, the probabilities and their
// gradients in fp32 (and as operands on tensor cores), lse and delta of the query rows. The
// same on the host (its size) and the device.
template <class Math>
struct BackwardShared {
  using Operand = typename Math::Operand;
  static constexpr int kTile = kBackwardTile;
  int ld, acc_ld, score_ld, probs_ld;
  Operand* q_tile;     // [kTile, ld]
  Operand* do_tile;    // [kTile, ld]
  Operand* k_tile;     // [kTile, ld]
  Operand* v_tile;     // [kTile, ld]
  float* acc[2];       // [kTile, acc_ld] each: dK and dV, or dQ (and unused)
  float* probs;        // [kTile, score_ld]: P [queries, keys]
  float* dprobs;       // [kTile, score_ld]: dS
  Operand* p_operand;  // [kTile, probs_ld]: P as an operand (= probs, fp32)
  Operand* ds_operand; // [kTile, probs_ld]: dS as an operand (= dprobs)
  float* lse_tile;     // [kTile]
  float* delta_tile;   // [kTile]
  int* start_tile;     // [kTile]: each query row's sample start (packed rows)
  SharedLayout layout;

  __host__ __device__ BackwardShared(void* base, int head_dim, int accumulators) : layout(base) {
    ld = Math::operand_ld(head_dim);
    acc_ld = Math::accumulator_ld(head_dim);
    score_ld = Math::accumulator_ld(kTile);
    q_tile = layout.take<Operand>(size_t{kTile} * ld);
    do_tile = layout.take<Operand>(size_t{kTile} * ld);
    k_tile = layout.take<Operand>(size_t{kTile} * ld);
    v_tile = layout.take<Operand>(size_t{kTile} * ld);
    for (int i = 0; i < 2; ++i) {
      acc[i] = i < accumulators ? layout.take<float>(size_t{kTile} * acc_ld) : nullptr;
    }
    probs = layout.take<float>(size_t{kTile} * score_ld);
    dprobs = layout.take<float>(size_t{kTile} * score_ld);
    probs_ld = score_ld;
    p_operand = probs;
    ds_operand = dprobs;
    lse_tile = layout.take<float>(kTile);
    delta_tile = layout.take<float>(kTile);
    start_tile = layout.take<int>(kTile);
  }
};

// The shared middle of both backward kernels, for one (query tile, key tile) pair:
// probs = P = exp(scale Q K^T - lse) on visible keys (0 elsewhere), dprobs = dS = P (dO V^T - delta)
// (fp32: they are their own operands).
template <class Format, class Math>
__device__ inline void probabilities_and_gradients(BackwardShared<Math>& t, int first_query,
                                                   int first_key, int time, int head_dim,
                                                   float scale) {
  constexpr int kTile = kBackwardTile;
  const int score_ld = t.score_ld;
  Math::template gemm<false, true, 2>(t.probs, score_ld, t.q_tile, t.ld, t.k_tile, t.ld, kTile,
                                      kTile, head_dim, scale, false);
  Math::template gemm<false, true, 2>(t.dprobs, score_ld, t.do_tile, t.ld, t.v_tile, t.ld, kTile,
                                      kTile, head_dim, 1.0f, false);
  __syncthreads();
  for (int e = threadIdx.x; e < kTile * kTile; e += blockDim.x) {
    const int r = e / kTile, j = e % kTile;
    const int query = first_query + r, key = first_key + j;
    const bool visible = query < time && key <= query && key >= t.start_tile[r];
    const float p = visible ? expf(t.probs[r * score_ld + j] - t.lse_tile[r]) : 0.0f;
    t.probs[r * score_ld + j] = p;
    t.dprobs[r * score_ld + j] = p * (t.dprobs[r * score_ld + j] - t.delta_tile[r]);
  }
  __syncthreads();
}

// lse, delta and the sample start of the query rows [first_query, first_query + kBackwardTile)
// of one head of row b.
__device__ inline void load_row_stats(float* lse_tile, float* delta_tile, int* start_tile,
                                      const float* lse, const float* delta,
                                      const int32_t* positions, const AttentionDims& dims, int b,
                                      int64_t offset, int first_query) {
  for (int r = threadIdx.x; r < kBackwardTile; r += blockDim.x) {
    const bool valid = first_query + r < dims.time;
    lse_tile[r] = valid ? lse[offset + first_query + r] : 0.0f;
    delta_tile[r] = valid ? delta[offset + first_query + r] : 0.0f;
    start_tile[r] = valid ? sample_start(positions, dims, b, first_query + r) : 0;
  }
}

// dK, dV of the keys [first_key, first_key + kTile) of one kv head: sums over the query heads
// of its group and over every query tile that can see these keys.
template <class Format, class Math>
__global__ void __launch_bounds__(kBackwardThreads)
attention_backward_dkdv_kernel(Storage<Format>* dk, Storage<Format>* dv,
                               const Storage<Format>* dout, const Storage<Format>* q,
                               const Storage<Format>* k, const Storage<Format>* v,
                               const float* lse, const float* delta, const int32_t* positions,
                               AttentionDims dims, float scale) {
  constexpr int kTile = kBackwardTile;
  ZT_DYNAMIC_SHARED(float, shared);
  BackwardShared<Math> t(SharedLayout::aligned(shared), dims.head_dim, 2);
  const int head_dim = dims.head_dim, ld = t.ld, acc_ld = t.acc_ld;
  float* dk_acc = t.acc[0];  // [kTile, acc_ld]
  float* dv_acc = t.acc[1];  // [kTile, acc_ld]

  const BlockTile block = block_tile();
  const int first_key = block.order * kTile;  // early keys (most work) first
  const int kv_head = block.head, b = block.b;
  const int keys = min(kTile, dims.time - first_key);
  load_tile<Format>(t.k_tile, ld, k + dims.kv_offset(b, kv_head) + first_key * dims.kv_stride(),
                    dims.kv_stride(), keys, kTile, head_dim);
  load_tile<Format>(t.v_tile, ld, v + dims.kv_offset(b, kv_head) + first_key * dims.kv_stride(),
                    dims.kv_stride(), keys, kTile, head_dim);
  zero(dk_acc, kTile * acc_ld);
  zero(dv_acc, kTile * acc_ld);
  const int group = dims.group();
  for (int head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    // Causal: queries before first_key see none of these keys; tiles are aligned (same size).
    // Within samples: once a tile's first query starts its sample after these keys, neither it
    // nor any later query sees them (starts never decrease along a row).
    for (int first_query = first_key; first_query < dims.time; first_query += kTile) {
      if (sample_start(positions, dims, b, first_query) > first_key + keys - 1) break;
      const int queries = min(kTile, dims.time - first_query);
      __syncthreads();  // the previous step's products are done with q_tile, do_tile, probs
      const int64_t row_offset = dims.q_offset(b, head) + first_query * dims.q_stride();
      load_tile<Format>(t.q_tile, ld, q + row_offset, dims.q_stride(), queries, kTile, head_dim);
      load_tile<Format>(t.do_tile, ld, dout + row_offset, dims.q_stride(), queries, kTile,
                        head_dim);
      load_row_stats(t.lse_tile, t.delta_tile, t.start_tile, lse, delta, positions, dims, b,
                     dims.lse_offset(b, head), first_query);
      __syncthreads();
      probabilities_and_gradients<Format>(t, first_query, first_key, dims.time, head_dim, scale);
      // dV += P^T dO, dK += scale dS^T Q
      Math::template gemm<true, false, 4>(dv_acc, acc_ld, t.p_operand, t.probs_ld, t.do_tile, ld,
                                          kTile, head_dim, kTile, 1.0f, true);
      Math::template gemm<true, false, 4>(dk_acc, acc_ld, t.ds_operand, t.probs_ld, t.q_tile, ld,
                                          kTile, head_dim, kTile, scale, true);
    }
  }
  __syncthreads();
  const int64_t key_offset = dims.kv_offset(b, kv_head) + first_key * dims.kv_stride();
  store_tile<Format>(dk + key_offset, dims.kv_stride(), dk_acc, acc_ld, keys, head_dim);
  store_tile<Format>(dv + key_offset, dims.kv_stride(), dv_acc, acc_ld, keys, head_dim);
}

// dQ of the queries [first_query, first_query + kTile) of one head: sums over the key tiles
// these queries see.
template <class Format, class Math>
__global__ void __launch_bounds__(kBackwardThreads)
attention_backward_dq_kernel(Storage<Format>* dq, const Storage<Format>* dout,
                             const Storage<Format>* q, const Storage<Format>* k,
                             const Storage<Format>* v, const float* lse, const float* delta,
                             const int32_t* positions, AttentionDims dims, float scale) {
  constexpr int kTile = kBackwardTile;
  ZT_DYNAMIC_SHARED(float, shared);
  BackwardShared<Math> t(SharedLayout::aligned(shared), dims.head_dim, 1);
  const int head_dim = dims.head_dim, ld = t.ld, acc_ld = t.acc_ld;
  float* dq_acc = t.acc[0];  // [kTile, acc_ld]

  const int tiles = (dims.time + kTile - 1) / kTile;
  const BlockTile block = block_tile();
  const int first_query = (tiles - 1 - block.order) * kTile;  // longest first
  const int head = block.head, b = block.b;
  const int kv_head = head / dims.group();
  const int queries = min(kTile, dims.time - first_query);
  const int64_t row_offset = dims.q_offset(b, head) + first_query * dims.q_stride();
  load_tile<Format>(t.q_tile, ld, q + row_offset, dims.q_stride(), queries, kTile, head_dim);
  load_tile<Format>(t.do_tile, ld, dout + row_offset, dims.q_stride(), queries, kTile, head_dim);
  load_row_stats(t.lse_tile, t.delta_tile, t.start_tile, lse, delta, positions, dims, b,
                 dims.lse_offset(b, head), first_query);
  zero(dq_acc, kTile * acc_ld);
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);
  // Keys from the tile holding the start of the first query's sample (aligned tiles).
  const int keys_begin = sample_start(positions, dims, b, first_query) / kTile * kTile;
  for (int first_key = keys_begin; first_key < first_query + queries; first_key += kTile) {
    const int keys = min(kTile, dims.time - first_key);
    __syncthreads();  // the previous step's product is done with k_tile, dprobs
    load_tile<Format>(t.k_tile, ld, k_rows + first_key * dims.kv_stride(), dims.kv_stride(), keys,
                      kTile, head_dim);
    load_tile<Format>(t.v_tile, ld, v_rows + first_key * dims.kv_stride(), dims.kv_stride(), keys,
                      kTile, head_dim);
    __syncthreads();
    probabilities_and_gradients<Format>(t, first_query, first_key, dims.time, head_dim, scale);
    // dQ += scale dS K
    Math::template gemm<false, false, 4>(dq_acc, acc_ld, t.ds_operand, t.probs_ld, t.k_tile, ld,
                                         kTile, head_dim, kTile, scale, true);
  }
  __syncthreads();
  store_tile<Format>(dq + row_offset, dims.q_stride(), dq_acc, acc_ld, queries, head_dim);
}

// ---- tensor cores ----------------------------------------------------------------------------
// Both kernels: 4 warps with their rows' fp32 accumulators in registers, and the block's own rows
// (K and V for dK/dV, Q and dO for dQ) in shared memory, from which the warps load their operands.
// - dK/dV: a block owns 64 keys and streams 64-query tiles of Q and dO. Its warps split each step
//   two ways, as FlashAttention-2's backward does. For S^T = K Q^T and dP^T = V dO^T, warp w takes
//   keys 32 (w / 2) .. + 32 and queries 32 (w % 2) .. + 32 (two row tiles sharing each Q and dO
//   operand), and writes P^T and dS^T, rounded to the dtype, to shared memory. For dV += P^T dO and
//   dK += dS^T Q it takes the same keys and half of D, loading P^T's and dS^T's rows as A operands:
//   128 accumulator registers at D 128, as 16 keys x D took, with each operand it loads serving
//   twice the work (per 32 x 32 x D of S: 112 ldmatrix.x4 for 256 mma, where 16-key warps loaded
//   160). The streamed tiles are single-buffered, so that two blocks fit an H100's SM (89 KB each
//   at D 128; double-buffered, 122 KB): while one block waits for its next tiles the other
//   computes. An A100 (164 KB an SM) fits one at D 128 (unpadded, swizzled tiles would fit two).
// - dQ: a warp owns 32 of the block's 128 queries as two row tiles that share each K and V operand
//   it loads, as the forward (one row tile at D 112: tc_query_row_tiles). The block streams 32-key
//   tiles of K and V, double-buffered (the next tiles' asynchronous copies in flight during the
//   current tiles' products). A warp's S and dP stay in its registers (mma accumulators); dS goes
//   from there into dS K as A operands.
//
// Rounding (issue 15): P and dS are rounded to the dtype before they multiply dO and Q (dV, dK),
// as in FlashAttention-2: those sums run over queries, where nothing cancels. dQ = dS K is a
// sum that cancels: a row of dS sums to zero (softmax's gradient), so rounded dS would leave a
// residue of K's common component (a k_proj bias) and the keys' mean in dQ. So dQ takes dS rounded
// once and subtracts what that leaves of a reference key: dQ_i -= r_i K_ref, with r_i = sum_j
// (round(dS_ij) - dS_ij) the row's rounding residue over every key tile and K_ref the mean of the
// block's first key tile. For any K_ref, sum_j round(dS_ij) K_j - r_i K_ref = sum_j dS_ij K_j +
// sum_j (round(dS_ij) - dS_ij) (K_j - K_ref): what stays is each rounding times K_j - K_ref, no
// common component, the noise of dK's and dV's own rounding (every bound of the tests holds, dq's
// worst errors beside dK's and dV's). (The row sum of dS is zero only up to delta's rounding; the
// identity does not need it.) Until 2026-11-29 dS went in as high + low parts, a third of the
// kernel's products. (A compensation tried on 2026-11-28 had failed the tests' bounds; which
// reference key it took is not recorded.)

// The dK/dV kernel's shared memory for head dim kD, the same on the host (its size) and the device.
template <int kD>
struct DkdvTcShared {
  static constexpr int kKeys = kTcBlockRows;        // the block's keys (64)
  static constexpr int kQueries = kTcDkdvQueries;   // a streamed query tile (64)
  static constexpr int kLd = operand_ld(kD);        // the D-wide 16-bit tiles
  static constexpr int kPLd = operand_ld(kQueries); // P^T and dS^T
  uint16_t* k_tile;   // [kKeys, kLd]
  uint16_t* v_tile;   // [kKeys, kLd]
  uint16_t* q_tile;   // [kQueries, kLd]
  uint16_t* do_tile;  // [kQueries, kLd]
  uint16_t* p_tile;   // [kKeys, kPLd]: P^T rounded to the dtype
  uint16_t* ds_tile;  // [kKeys, kPLd]: dS^T rounded to the dtype
  float* lse;         // [kQueries]: the query tile's lse (log2 units)
  float* delta;       // [kQueries]
  int* start;         // [kQueries]: its rows' sample starts
  SharedLayout layout;

  __host__ __device__ explicit DkdvTcShared(void* base) : layout(base) {
    k_tile = layout.take<uint16_t>(size_t{kKeys} * kLd);
    v_tile = layout.take<uint16_t>(size_t{kKeys} * kLd);
    q_tile = layout.take<uint16_t>(size_t{kQueries} * kLd);
    do_tile = layout.take<uint16_t>(size_t{kQueries} * kLd);
    p_tile = layout.take<uint16_t>(size_t{kKeys} * kPLd);
    ds_tile = layout.take<uint16_t>(size_t{kKeys} * kPLd);
    lse = layout.take<float>(kQueries);
    delta = layout.take<float>(kQueries);
    start = layout.take<int>(kQueries);
  }
};

// The dQ kernel's shared memory for head dim kD, the same on the host (its size) and the device.
template <int kD>
struct DqTcShared {
  static constexpr int kRows = tc_query_rows(kD);  // the block's queries (128; 64 at D 112)
  static constexpr int kKeys = kTcBackwardTile;    // a streamed key tile (32)
  static constexpr int kLd = operand_ld(kD);
  static constexpr int kTileElements = kKeys * kLd;
  uint16_t* q_tile;     // [kRows, kLd]
  uint16_t* do_tile;    // [kRows, kLd]
  // [2 buffers][K, V][kKeys, kLd]; one array indexed by arithmetic (an array of pointers indexed
  // by the run-time buffer number would live in local memory)
  uint16_t* kv_tiles;
  float* lse;           // [kRows]: the block's rows' lse (log2 units), delta and sample starts
  float* delta;         // [kRows]
  int* start;           // [kRows]
  float* key_reference; // [kD]: the key dQ subtracts its rounding residue against
  float* residues;      // [2 rows a lane x row tiles a warp][kTcThreads]: DqWarpRows::residue
  SharedLayout layout;

  __host__ __device__ explicit DqTcShared(void* base) : layout(base) {
    q_tile = layout.take<uint16_t>(size_t{kRows} * kLd);
    do_tile = layout.take<uint16_t>(size_t{kRows} * kLd);
    kv_tiles = layout.take<uint16_t>(size_t{4} * kTileElements);
    lse = layout.take<float>(kRows);
    delta = layout.take<float>(kRows);
    start = layout.take<int>(kRows);
    key_reference = layout.take<float>(kD);
    residues = layout.take<float>(size_t{2} * tc_query_row_tiles(kD) * kTcThreads);
  }
  __device__ uint16_t* k_tile(int buffer) const { return kv_tiles + 2 * buffer * kTileElements; }
  __device__ uint16_t* v_tile(int buffer) const { return kv_tiles + (2 * buffer + 1) * kTileElements; }
};

// A query row's lse (in log2 units: lse log2(e), see kLog2e), delta and sample start, for lse/delta
// offset `offset` (one head); past T: lse and delta 0, start INT_MAX (a start no key reaches:
// every key masked).
struct QueryStats {
  float lse_log2 = 0.0f;
  float delta = 0.0f;
  int start = INT_MAX;
};
__device__ inline QueryStats query_stats(const float* lse, const float* delta, const int32_t* positions,
                                         const AttentionDims& dims, int b, int64_t offset, int query) {
  if (query >= dims.time) return {};
  return {lse[offset + query] * kLog2e, delta[offset + query], sample_start(positions, dims, b, query)};
}

// Row r of a block's stats tiles (lse, delta, start: [rows] each).
__device__ inline void store_query_stats(float* lse_tile, float* delta_tile, int* start_tile, int r,
                                         const QueryStats& stats) {
  lse_tile[r] = stats.lse_log2;
  delta_tile[r] = stats.delta;
  start_tile[r] = stats.start;
}

// The dK/dV kernel's step after (head, first_query): the head's next query tile while its
// queries can still see one of the keys up to last_key (sample starts never decrease along a
// row), else the group's next head from the query tile at first_key; false after the last.
__device__ inline bool next_query_step(int& head, int& first_query, int first_key, int last_key,
                                       int head_end, const int32_t* positions,
                                       const AttentionDims& dims, int b) {
  first_query += kTcDkdvQueries;
  if (first_query < dims.time && sample_start(positions, dims, b, first_query) <= last_key) {
    return true;
  }
  ++head;
  first_query = first_key;
  return head < head_end;
}

// One element of P and dS from S (unscaled; -inf where (query, key) is not visible: P 0) and
// dP: P = 2^(s scale log2(e) - lse log2(e)) = e^(scale s - lse), as the forward's (kLog2e).
struct Gradient {
  float p, ds;
};
__device__ inline Gradient probability_gradient(float s, float dp, float lse_log2, float delta,
                                                float scale_log2) {
  const float p = exp2_flushed(fmaf(s, scale_log2, -lse_log2));
  return {p, p * (dp - delta)};
}

// Whether some query of a warp's 32 (from query0) sees some key of its 32 (from key0): its first
// query (the earliest sample start; past T, start INT_MAX) sees the keys' first and the first key
// is at most the last valid query. The same in every lane.
__device__ inline bool warp_sees_any(int key0, int query0, const int* start, int time) {
  return key0 <= min(query0 + 31, time - 1) && start[0] <= key0 + 31;
}

// A warp's [32, 32] part of P^T and dS^T (keys warp_keys .., queries warp_queries .. of the block's
// and the step's) from its S^T and dP^T ([2 row tiles of keys][4 n-tiles of queries]), masked
// where a query does not see a key, rounded to the dtype, into the block's P^T and dS^T tiles.
template <class Format, int kD>
__device__ inline void store_probabilities(const DkdvTcShared<kD>& shared, float (&s)[2][4][4], const float (&dp)[2][4][4],
                                           int warp_keys, int warp_queries, int first_key, int first_query,
                                           int time, float scale_log2) {
  constexpr int kPLd = DkdvTcShared<kD>::kPLd, kM = 2, kN = 4;
  const int key0 = first_key + warp_keys, query0 = first_query + warp_queries;
  const float* lse = shared.lse + warp_queries;      // [32]
  const float* delta = shared.delta + warp_queries;  // [32]
  const int* start = shared.start + warp_queries;    // [32]
  // Every query valid, after the warp's keys, and its sample (the last query's, the latest)
  // started by the first key: no mask. (A warp that skipped its products is masked whole.)
  if (!(query0 + 32 <= time && key0 + 31 <= query0 && key0 >= start[31])) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int j = 0; j < kN; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = fragment_col(j, e), key = key0 + 16 * m + fragment_row(e);
          if (!(key <= query0 + c && key >= start[c])) s[m][j][e] = -INFINITY;  // (past T: start INT_MAX)
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    // this lane's columns 2t, 2t + 1 of n-tile j: their lse and delta
    const float2 lse_pair = *reinterpret_cast<const float2*>(lse + fragment_col(j, 0));
    const float2 delta_pair = *reinterpret_cast<const float2*>(delta + fragment_col(j, 0));
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const Gradient first = probability_gradient(s[m][j][2 * h], dp[m][j][2 * h], lse_pair.x, delta_pair.x, scale_log2);
        const Gradient second =
            probability_gradient(s[m][j][2 * h + 1], dp[m][j][2 * h + 1], lse_pair.y, delta_pair.y, scale_log2);
        const int offset = (warp_keys + 16 * m + fragment_row(2 * h)) * kPLd + warp_queries + fragment_col(j, 0);
        *reinterpret_cast<uint32_t*>(shared.p_tile + offset) = pack_pair<Format>(first.p, second.p);
        *reinterpret_cast<uint32_t*>(shared.ds_tile + offset) = pack_pair<Format>(first.ds, second.ds);
      }
    }
  }
}

// dK, dV of the keys [first_key, + 64) of one kv head: sums over the query heads of its group and
// every query tile that sees these keys, in a fixed order. Warp w: P^T and dS^T of keys 32 (w / 2)
// .. and queries 32 (w % 2) .. of each step; dK and dV of the same keys and half of D: n-tile pairs
// [0, kHalfPairs) and [kPairs - kHalfPairs, kPairs). Where the pairs do not split evenly (D 80:
// five) the halves share the middle pair, which both compute and the first stores: the same code
// in both halves (a pair count that differs between them cost registers: D 112 spilled).
// The single Q and dO tiles are refilled as soon as the step is done with each, so the loads
// overlap products: dO's with S^T, the next step's Q with dV (its rows' stats load during dK). A
// warp none of whose queries sees any of its keys skips its S^T and dP^T.
template <class Format, int kD>
__global__ void __launch_bounds__(kTcThreads, 2)
attention_backward_dkdv_tc_kernel(Storage<Format>* dk, Storage<Format>* dv,
                                  const Storage<Format>* dout, const Storage<Format>* q,
                                  const Storage<Format>* k, const Storage<Format>* v,
                                  const float* lse, const float* delta, const int32_t* positions,
                                  AttentionDims dims, float scale) {
  using T = MmaType<Format>;
  using Shared = DkdvTcShared<kD>;
  constexpr int kKeys = Shared::kKeys, kQueries = Shared::kQueries, kLd = Shared::kLd, kPLd = Shared::kPLd;
  constexpr int kPairs = kD / 16, kHalfPairs = (kPairs + 1) / 2;  // n-tile pairs of D, of a warp's half
  constexpr int kDN = 2 * kHalfPairs, kShared = 2 * (2 * kHalfPairs - kPairs);  // n-tiles: a half's, both halves'
  ZT_DYNAMIC_SHARED(float, shared_memory);
  Shared shared(SharedLayout::aligned(shared_memory));
  const int warp = threadIdx.x / 32;
  const int warp_keys = 32 * (warp / 2), half = warp % 2;  // its keys; its queries (S) and columns (dK, dV)
  const int warp_queries = 32 * half, columns = half * 16 * (kPairs - kHalfPairs);
  const int first_stored = half * kShared;  // the n-tile the warp's stores start from

  const BlockTile block = block_tile();
  const int first_key = block.order * kKeys;  // early keys (most work) first
  const int kv_head = block.head, b = block.b;
  const int keys = min(kKeys, dims.time - first_key);
  const int64_t q_stride = dims.q_stride(), kv_stride = dims.kv_stride();
  const int64_t key_offset = dims.kv_offset(b, kv_head) + first_key * kv_stride;
  copy_rows<kD>(shared.k_tile, kLd, k + key_offset, kv_stride, keys, kKeys, threadIdx.x, kTcThreads);
  copy_rows<kD>(shared.v_tile, kLd, v + key_offset, kv_stride, keys, kKeys, threadIdx.x, kTcThreads);
  float dk_acc[2][kDN][4], dv_acc[2][kDN][4];  // [32, 8 kDN] each: the warp's keys and columns
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    zero_fragments(dk_acc[m]);
    zero_fragments(dv_acc[m]);
  }

  // The first step: the group's first head, the query tile at first_key (it sees these keys); its
  // Q tile on the way, its rows' stats in place (thread r: row r).
  const int head_end = (kv_head + 1) * dims.group(), last_key = first_key + keys - 1;
  int head = kv_head * dims.group(), first_query = first_key;
  copy_tile_async_by_column<kQueries, kD>(shared.q_tile, kLd, q + dims.q_offset(b, head) + first_query * q_stride,
                                          q_stride, min(kQueries, dims.time - first_query));
  async_copy_commit();
  if (threadIdx.x < kQueries) {
    store_query_stats(shared.lse, shared.delta, shared.start, threadIdx.x,
                      query_stats(lse, delta, positions, dims, b, dims.lse_offset(b, head), first_query + threadIdx.x));
  }
  for (bool more = true; more;) {
    // dO on its way beside Q (the previous step's last barrier: no warp reads it)
    copy_tile_async_by_column<kQueries, kD>(shared.do_tile, kLd, dout + dims.q_offset(b, head) + first_query * q_stride,
                                            q_stride, min(kQueries, dims.time - first_query));
    async_copy_commit();
    async_copy_wait<1>();
    __syncthreads();  // Q and the stats in place
    // S^T [32, 32] = K_w Q_w^T, dP^T = V_w dO_w^T (two row tiles of keys sharing each operand)
    const bool any = warp_sees_any(first_key + warp_keys, first_query + warp_queries, shared.start + warp_queries, dims.time);
    float s[2][4][4], dp[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      zero_fragments(s[m]);
      zero_fragments(dp[m]);
    }
    if (any) mma_shared_a_bt<T, kD>(s, shared.k_tile + warp_keys * kLd, kLd, shared.q_tile + warp_queries * kLd, kLd);
    async_copy_wait<0>();
    __syncthreads();  // dO in place
    if (any) mma_shared_a_bt<T, kD>(dp, shared.v_tile + warp_keys * kLd, kLd, shared.do_tile + warp_queries * kLd, kLd);
    store_probabilities<Format, kD>(shared, s, dp, warp_keys, warp_queries, first_key, first_query, dims.time,
                                    scale * kLog2e);
    __syncthreads();  // P^T and dS^T in place; no warp reads the stats again this step
    // The next step, its rows' stats loading during dK
    int next_head = head, next_query = first_query;
    const bool has_next = next_query_step(next_head, next_query, first_key, last_key, head_end, positions, dims, b);
    QueryStats next_stats;
    if (has_next && threadIdx.x < kQueries) {
      next_stats = query_stats(lse, delta, positions, dims, b, dims.lse_offset(b, next_head), next_query + threadIdx.x);
    }
    // dK_w += dS^T [32, kQueries] Q [kQueries, half of D] (scaled at the end), then dV_w += P^T dO
    mma_shared_a_b<T, kQueries>(dk_acc, shared.ds_tile + warp_keys * kPLd, kPLd, shared.q_tile + columns, kLd);
    __syncthreads();  // every warp is done with Q: the next step's on its way during dV
    if (has_next) {
      copy_tile_async_by_column<kQueries, kD>(shared.q_tile, kLd, q + dims.q_offset(b, next_head) + next_query * q_stride,
                                              q_stride, min(kQueries, dims.time - next_query));
      async_copy_commit();
      if (threadIdx.x < kQueries) store_query_stats(shared.lse, shared.delta, shared.start, threadIdx.x, next_stats);
    }
    mma_shared_a_b<T, kQueries>(dv_acc, shared.p_tile + warp_keys * kPLd, kPLd, shared.do_tile + columns, kLd);
    __syncthreads();  // every warp is done with dO, P^T and dS^T
    head = next_head;
    first_query = next_query;
    more = has_next;
  }
  const float dk_factor[2] = {scale, scale}, dv_factor[2] = {1.0f, 1.0f};
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int tile_key = first_key + warp_keys + kWarpRows * m;
    const int valid = max(0, min(kWarpRows, dims.time - tile_key));
    const int64_t tile_rows = dims.kv_offset(b, kv_head) + tile_key * kv_stride + columns;
    store_fragments<Format>(dk + tile_rows, kv_stride, dk_acc[m], dk_factor, valid, first_stored);
    store_fragments<Format>(dv + tile_rows, kv_stride, dv_acc[m], dv_factor, valid, first_stored);
  }
}

// reference[kD] (fp32) = the mean of the first `rows` rows of a 16-bit [., ld] key tile, a
// column a thread: the reference key whose rounding residue dQ subtracts (the Rounding comment).
template <class Format, int kD>
__device__ inline void mean_key_row(float* reference, const uint16_t* key_tile, int ld, int rows) {
  for (int c = static_cast<int>(threadIdx.x); c < kD; c += kTcThreads) {
    float total = 0.0f;
    for (int r = 0; r < rows; ++r) total += Format::to_float(key_tile[r * ld + c]);
    reference[c] = total / static_cast<float>(rows);
  }
}

// dq[16, 8 kDN] (a warp's accumulators) -= r reference^T, r the rows' rounding residues (each
// lane's part of rows g and g + 8, summed here over the row's 4 lanes).
template <int kDN>
__device__ inline void subtract_residue_key(float (&dq)[kDN][4], float (&residue)[2], const float* reference) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    residue[h] += __shfl_xor_sync(0xFFFFFFFFu, residue[h], 1);
    residue[h] += __shfl_xor_sync(0xFFFFFFFFu, residue[h], 2);
  }
#pragma unroll
  for (int j = 0; j < kDN; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[j][e] -= residue[e / 2] * reference[fragment_col(j, e)];
  }
}

// A row of a dQ row tile as mask_tile reads it: its query and first key (its sample's start;
// INT_MAX past T, a start no key reaches, so every key is masked).
struct GradientRow {
  int query;
  int start;
};

// A dQ warp's rows' lse (log2 units), delta and first key (as GradientRow's start), row r of the
// warp query first_query + r, and the lanes' running rounding residues (this lane's part of
// sum_j round(dS_ij) - dS_ij for its rows g, g + 8 of row tile m at residue[(2 m + h)
// kTcThreads + threadIdx.x]), in shared memory: in registers they made the kernel spill at D 128
// (20 values a thread).
struct DqWarpRows {
  int first_query;
  const float* lse_log2;  // [16 kM]
  const float* delta;     // [16 kM]
  const int* start;       // [16 kM]
  float* residue;         // [2 kM][kTcThreads]
};

// One key tile of a dQ warp's kM row tiles: S [16 kM, kCols] = Q_w K^T and dP = dO_w V^T with
// each K and V operand serving every row tile, dS = P (dP - delta) rounded once to the dtype
// (its rounding residue added to stats.residue), dQ_w [16 kM, kD]
// += dS K (scaled at the end). q_warp, do_warp: the warp's rows of the block's Q and dO tiles.
// masked: some row of the warp misses some key of the tile (the same in every lane).
template <class Format, int kD, int kM, int kDN>
__device__ inline void dq_tc_tile(float (&dq)[kM][kDN][4], const uint16_t* q_warp, const uint16_t* do_warp,
                                  const DqWarpRows& stats, const uint16_t* k_tile,
                                  const uint16_t* v_tile, int first_key, bool masked, float scale_log2) {
  using T = MmaType<Format>;
  constexpr int kCols = kTcBackwardTile, kN = kCols / 8, kLd = operand_ld(kD);
  float s[kM][kN][4], dp[kM][kN][4];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    zero_fragments(s[m]);
    zero_fragments(dp[m]);
  }
  mma_shared_a_bt<T, kD>(s, q_warp, kLd, k_tile, kLd);
  mma_shared_a_bt<T, kD>(dp, do_warp, kLd, v_tile, kLd);
  if (masked) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      GradientRow rows[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = kWarpRows * m + fragment_row(2 * h);
        rows[h] = {stats.first_query + r, stats.start[r]};
      }
      mask_tile(rows, s[m], first_key);
    }
  }
  uint32_t ds[kM][kN / 2][4];  // dS [16 kM, kCols] rounded once, as dS K's A operands
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float residue[2] = {0.0f, 0.0f};  // rows g, g + 8: sum_j round(dS_ij) - dS_ij over the tile
#pragma unroll
    for (int j = 0; j < kN; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = kWarpRows * m + fragment_row(2 * h);  // the row in the warp's
        const float lse_log2 = stats.lse_log2[r], delta = stats.delta[r];
        const float first = probability_gradient(s[m][j][2 * h], dp[m][j][2 * h], lse_log2, delta, scale_log2).ds;
        const float second = probability_gradient(s[m][j][2 * h + 1], dp[m][j][2 * h + 1], lse_log2, delta, scale_log2).ds;
        float first_rounded, second_rounded;
        ds[m][j / 2][a_register(j, h)] = pack_pair_rounded<Format>(first, second, first_rounded, second_rounded);
        residue[h] += first_rounded - first;
        residue[h] += second_rounded - second;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) stats.residue[(2 * m + h) * kTcThreads + threadIdx.x] += residue[h];
  }
  mma_operands_b<T>(dq, ds, k_tile, kLd);
}

// dQ of the queries [first_query, + 128) of one head (warp w: queries first_query + 32 w .., as
// two row tiles; 64 and 16 at D 112): sums over the key tiles these queries see. Two blocks an
// SM (109 KB each at D 128: an H100 fits two, an A100 one at D 96 and 128): a thread's 255
// registers hold the warp's dQ (128 at D 128), S and dP (32 each) and dS's
// operands; Q's and dO's operands are read from shared memory at each step. A warp skips the key
// tiles all its rows precede or follow (as the forward): every dS there is 0, and so is its
// rounding residue, so no bit changes.
template <class Format, int kD>
__global__ void __launch_bounds__(kTcThreads, 2)
attention_backward_dq_tc_kernel(Storage<Format>* dq, const Storage<Format>* dout,
                                const Storage<Format>* q, const Storage<Format>* k,
                                const Storage<Format>* v, const float* lse, const float* delta,
                                const int32_t* positions, AttentionDims dims, float scale) {
  using Shared = DqTcShared<kD>;
  constexpr int kM = tc_query_row_tiles(kD), kDN = kD / 8;  // row tiles, n-tiles of dQ
  constexpr int kRows = Shared::kRows, kCols = Shared::kKeys, kLd = Shared::kLd;
  ZT_DYNAMIC_SHARED(float, shared_memory);
  Shared shared(SharedLayout::aligned(shared_memory));
  const int warp = threadIdx.x / 32;

  const int tiles = (dims.time + kRows - 1) / kRows;
  const BlockTile block = block_tile();
  const int first_query = (tiles - 1 - block.order) * kRows;  // longest first
  const int head = block.head, b = block.b, kv_head = head / dims.group();
  const int queries = min(kRows, dims.time - first_query);
  const int warp_query = first_query + warp * kM * kWarpRows;  // this warp's first row
  // The keys this warp's rows see: [warp_first_key, warp_last_key] (none past T), as the forward's.
  const bool warp_valid = warp_query < dims.time;
  const int warp_first_key = warp_valid ? sample_start(positions, dims, b, warp_query) : 0;
  const int warp_last_key = warp_valid ? min(warp_query + kM * kWarpRows, dims.time) - 1 : -1;
  // Its last row's sample start, the latest of its rows' (INT_MAX when some row is past T): a
  // tile from it on to the warp's first row needs no mask.
  const int warp_end = warp_query + kM * kWarpRows;
  const int warp_last_start = warp_end <= dims.time ? sample_start(positions, dims, b, warp_end - 1) : INT_MAX;
  const int64_t q_stride = dims.q_stride(), kv_stride = dims.kv_stride();
  const int64_t query_offset = dims.q_offset(b, head) + first_query * q_stride;
  copy_rows<kD>(shared.q_tile, kLd, q + query_offset, q_stride, queries, kRows, threadIdx.x, kTcThreads);
  copy_rows<kD>(shared.do_tile, kLd, dout + query_offset, q_stride, queries, kRows, threadIdx.x, kTcThreads);
  const uint16_t* q_warp = shared.q_tile + warp * kM * kWarpRows * kLd;   // [16 kM, kLd]
  const uint16_t* do_warp = shared.do_tile + warp * kM * kWarpRows * kLd;  // [16 kM, kLd]
  float dq_acc[kM][kDN][4];  // [16 kM, kD]: row tile m the warp's rows 16 m ..
#pragma unroll
  for (int m = 0; m < kM; ++m) zero_fragments(dq_acc[m]);
  for (int r = threadIdx.x; r < kRows; r += kTcThreads) {  // (read after the barrier below)
    store_query_stats(shared.lse, shared.delta, shared.start, r,
                      query_stats(lse, delta, positions, dims, b, dims.lse_offset(b, head), first_query + r));
  }
  for (int i = threadIdx.x; i < 2 * kM * kTcThreads; i += kTcThreads) shared.residues[i] = 0.0f;
  const int warp_row = warp * kM * kWarpRows;  // the warp's first row in the block's
  const DqWarpRows stats = {warp_query, shared.lse + warp_row, shared.delta + warp_row, shared.start + warp_row,
                            shared.residues};

  // Keys from the tile holding the start of the first query's sample (aligned tiles).
  const int keys_begin = sample_start(positions, dims, b, first_query) / kCols * kCols;
  const int keys_end = first_query + queries;
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);
  copy_tile_pair_async<kCols, kD>(shared.k_tile(0), shared.v_tile(0), kLd,
                                  k_rows + keys_begin * kv_stride, v_rows + keys_begin * kv_stride,
                                  kv_stride, min(kCols, dims.time - keys_begin));
  async_copy_wait<0>();
  __syncthreads();
  // (read after the loop, whose barriers order it; buffer 0 is next written after the first)
  mean_key_row<Format, kD>(shared.key_reference, shared.k_tile(0), kLd, min(kCols, dims.time - keys_begin));
  int buffer = 0;
  for (int first_key = keys_begin; first_key < keys_end; first_key += kCols, buffer ^= 1) {
    const int next_key = first_key + kCols;
    if (next_key < keys_end) {  // the next K, V tiles on their way into the other buffer
      copy_tile_pair_async<kCols, kD>(shared.k_tile(buffer ^ 1), shared.v_tile(buffer ^ 1),
                                      kLd, k_rows + next_key * kv_stride, v_rows + next_key * kv_stride,
                                      kv_stride, min(kCols, dims.time - next_key));
    }
    if (first_key <= warp_last_key && first_key + kCols > warp_first_key) {  // (the same in every lane)
      const bool masked = !(first_key + kCols - 1 <= warp_query && first_key >= warp_last_start);
      dq_tc_tile<Format, kD>(dq_acc, q_warp, do_warp, stats, shared.k_tile(buffer), shared.v_tile(buffer),
                             first_key, masked, scale * kLog2e);
    }
    async_copy_wait<0>();
    __syncthreads();  // the next tile is in place; every warp is done with this one
  }
  const float dq_factor[2] = {scale, scale};
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float residue[2] = {stats.residue[2 * m * kTcThreads + threadIdx.x], stats.residue[(2 * m + 1) * kTcThreads + threadIdx.x]};
    subtract_residue_key(dq_acc[m], residue, shared.key_reference);
    const int tile_query = warp_query + kWarpRows * m;
    store_fragments<Format>(dq + query_offset + (tile_query - first_query) * q_stride, q_stride, dq_acc[m],
                            dq_factor, max(0, min(kWarpRows, dims.time - tile_query)));
  }
}

// The two backward launches, dK/dV (one block per key tile and kv head) then dQ (one block per
// query tile and head), with the kernels' shared memory allowed first; both kernel kinds (tensor
// cores, CUDA cores) take the same arguments.
template <class Format, class DkdvKernel, class DqKernel>
void launch_dkdv_then_dq(const CudaBackendImpl& backend, cudaStream_t stream, const char* op,
                         DkdvKernel dkdv_kernel, size_t dkdv_bytes, DqKernel dq_kernel, size_t dq_bytes,
                         int dkdv_rows, int dq_rows, int threads, Tensor& dq, Tensor& dk, Tensor& dv,
                         const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& lse, const float* delta, const int32_t* positions,
                         const AttentionDims& dims, float scale_factor) {
  allow_shared_memory(backend, op, dkdv_kernel, dkdv_bytes, dims.head_dim);
  const dim3 dkdv_grid = tile_grid(op, dims.time, dkdv_rows, dims.kv_heads, dims.batch);
  const dim3 block(static_cast<unsigned int>(threads));
  launch({dkdv_grid, block, dkdv_bytes, stream}, dkdv_kernel, data_of<Format>(dk), data_of<Format>(dv),
         data_of<Format>(dout), data_of<Format>(q), data_of<Format>(k), data_of<Format>(v), lse.f32(), delta,
         positions, dims, scale_factor);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_dkdv_kernel");
  allow_shared_memory(backend, op, dq_kernel, dq_bytes, dims.head_dim);
  const dim3 dq_grid = tile_grid(op, dims.time, dq_rows, dims.heads, dims.batch);
  launch({dq_grid, block, dq_bytes, stream}, dq_kernel, data_of<Format>(dq), data_of<Format>(dout),
         data_of<Format>(q), data_of<Format>(k), data_of<Format>(v), lse.f32(), delta, positions, dims,
         scale_factor);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
}

template <class Format>
void launch_backward_tc(const CudaBackendImpl& backend, cudaStream_t stream, const char* op,
                        Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& lse, const float* delta,
                        const int32_t* positions, const AttentionDims& dims, float scale_factor) {
  with_head_dim(dims.head_dim, [&](auto head_dim) {
    constexpr int kD = decltype(head_dim)::value;
    const size_t dkdv_bytes = DkdvTcShared<kD>(nullptr).layout.launch_bytes();
    const size_t dq_bytes = DqTcShared<kD>(nullptr).layout.launch_bytes();
    launch_dkdv_then_dq<Format>(backend, stream, op, attention_backward_dkdv_tc_kernel<Format, kD>, dkdv_bytes,
                                attention_backward_dq_tc_kernel<Format, kD>, dq_bytes, kTcBlockRows, DqTcShared<kD>::kRows,
                                kTcThreads, dq, dk, dv, dout, q, k, v, lse, delta, positions, dims, scale_factor);
  });
}

// ---- host side -----------------------------------------------------------------------------

template <class Format, class Math>
void launch_backward(const CudaBackendImpl& backend, cudaStream_t stream, const char* op,
                     Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& lse, const float* delta,
                     const int32_t* positions, const AttentionDims& dims, float scale_factor) {
  const size_t dkdv_bytes = BackwardShared<Math>(nullptr, dims.head_dim, 2).layout.launch_bytes();
  const size_t dq_bytes = BackwardShared<Math>(nullptr, dims.head_dim, 1).layout.launch_bytes();
  launch_dkdv_then_dq<Format>(backend, stream, op, attention_backward_dkdv_kernel<Format, Math>, dkdv_bytes,
                              attention_backward_dq_kernel<Format, Math>, dq_bytes, kBackwardTile,
                              kBackwardTile, kBackwardThreads, dq, dk, dv, dout, q, k, v, lse, delta, positions, dims,
                              scale_factor);
}

}  // namespace

void run_attention_backward_kernels(CudaBackendImpl& backend, bool tensor_cores, Tensor dq,
                                    Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                                    Tensor out, Tensor lse, const int32_t* positions,
                                    const AttentionDims& dims, float scale) {
  const char* op = "attention_backward";
  cudaStream_t stream = backend.stream();
  Buffer delta = backend.scratch(static_cast<size_t>(lse.numel()) * sizeof(float));  // delta[B,H,T]
  dispatch_float(q.dtype, op, "q", [&](auto format) {
    using Format = decltype(format);
    const int64_t rows = int64_t{dims.batch} * dims.time * dims.heads;
    launch({grid_for(rows * 32), kThreads, 0, stream}, attention_delta_kernel<Format>,
        static_cast<float*>(delta.data()), data_of<Format>(dout), data_of<Format>(out), dims);
    ZT_CUDA_CHECK_LAUNCH("attention_delta_kernel");
    const float* delta_values = static_cast<const float*>(delta.data());
    if constexpr (!std::is_same_v<Format, Fp32Format>) {
      if (tensor_cores && vector_aligned({&dq, &dk, &dv, &dout, &q, &k, &v})) {
        launch_backward_tc<Format>(backend, stream, op, dq, dk, dv, dout, q, k, v, lse,
                                   delta_values, positions, dims, scale);
        return;
      }
    }
    launch_backward<Format, CudaCoreMath<Format>>(backend, stream, op, dq, dk, dv, dout, q, k, v,
                                                  lse, delta_values, positions, dims, scale);
  });
}

}  // namespace zt::cuda
