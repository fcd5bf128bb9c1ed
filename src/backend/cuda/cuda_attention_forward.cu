// The CUDA backend's causal self-attention with grouped-query heads, forward, in the
// FlashAttention-2 manner: one block per (query tile, head, batch) walks the key tiles its
// queries can see with an online softmax (running max and sum per query row), so no T x T
// matrix ever exists; it writes out and the log-sum-exp that backward uses to recompute the
// probabilities. bf16/fp16 with D a multiple of 16 (up to 128) run attention_forward_tc_kernel
// on tensor cores (mma.sync, each warp's scores and accumulators in registers); fp32 and other head dims run
// attention_forward_kernel on CUDA cores (fp32 tiles in shared memory, CudaCoreMath).
#include "backend/cuda/cuda_attention.cuh"

namespace zt::cuda {

namespace {

using namespace attention;

// The forward kernel's shared memory, the same on the host (its size) and the device.
template <class Math>
struct ForwardShared {
  using Operand = typename Math::Operand;
  static constexpr int kTile = kForwardTile;
  int ld, acc_ld, score_ld, probs_ld;
  Operand* q_tile;    // [kTile, ld]
  Operand* k_tile;    // [kTile, ld]
  Operand* v_tile;    // [kTile, ld]
  float* o_acc;       // [kTile, acc_ld]: unnormalised output
  float* scores;      // [kTile, score_ld]: scores, then probabilities
  Operand* probs;     // [kTile, probs_ld]: the probabilities as an operand (= scores, fp32)
  float* row_max;     // [kTile]
  float* row_sum;     // [kTile]
  float* row_rescale; // [kTile]
  SharedLayout layout;

  __host__ __device__ ForwardShared(void* base, int head_dim) : layout(base) {
    ld = Math::operand_ld(head_dim);
    acc_ld = Math::accumulator_ld(head_dim);
    score_ld = Math::accumulator_ld(kTile);
    q_tile = layout.take<Operand>(size_t{kTile} * ld);
    k_tile = layout.take<Operand>(size_t{kTile} * ld);
    v_tile = layout.take<Operand>(size_t{kTile} * ld);
    o_acc = layout.take<float>(size_t{kTile} * acc_ld);
    scores = layout.take<float>(size_t{kTile} * score_ld);
    probs_ld = score_ld;
    probs = scores;
    row_max = layout.take<float>(kTile);
    row_sum = layout.take<float>(kTile);
    row_rescale = layout.take<float>(kTile);
  }
};

template <class Format, class Math>
__global__ void __launch_bounds__(kForwardThreads)
attention_forward_kernel(Storage<Format>* out, float* lse, const Storage<Format>* q,
                         const Storage<Format>* k, const Storage<Format>* v,
                         const int32_t* positions, AttentionDims dims, float scale) {
  constexpr int kTile = kForwardTile;
  ZT_DYNAMIC_SHARED(float, shared);
  ForwardShared<Math> tiles(SharedLayout::aligned(shared), dims.head_dim);
  const int head_dim = dims.head_dim, ld = tiles.ld, acc_ld = tiles.acc_ld;
  const int score_ld = tiles.score_ld;
  float* o_acc = tiles.o_acc;
  float* scores = tiles.scores;
  float* row_max = tiles.row_max;
  float* row_sum = tiles.row_sum;
  float* row_rescale = tiles.row_rescale;

  const int tiles_count = (dims.time + kTile - 1) / kTile;
  const BlockTile block = block_tile();
  const int tile = tiles_count - 1 - block.order;  // the longest rows first
  const int head = block.head, b = block.b;
  const int kv_head = head / dims.group();
  const int first_query = tile * kTile;
  const int queries = min(kTile, dims.time - first_query);
  const Storage<Format>* q_rows = q + dims.q_offset(b, head) + first_query * dims.q_stride();
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);

  load_tile<Format>(tiles.q_tile, ld, q_rows, dims.q_stride(), queries, kTile, head_dim);
  zero(o_acc, kTile * acc_ld);
  for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }
  // Row r of the softmax is handled by the 4 consecutive lanes 4r .. 4r+3.
  constexpr int kLanesPerRow = kForwardThreads / kTile;
  const int my_row = threadIdx.x / kLanesPerRow, my_part = threadIdx.x % kLanesPerRow;
  const int my_query = first_query + my_row;
  const int my_start = my_query < dims.time ? sample_start(positions, dims, b, my_query) : 0;
  // Causal within samples: keys [start of the first query's sample, last query]; key tiles stay
  // aligned to kTile.
  const int keys_begin = sample_start(positions, dims, b, first_query) / kTile * kTile;
  const int keys_end = first_query + queries;
  for (int first_key = keys_begin; first_key < keys_end; first_key += kTile) {
    const int keys = min(kTile, dims.time - first_key);
    __syncthreads();  // the previous tile's products are done with k_tile, v_tile, scores
    load_tile<Format>(tiles.k_tile, ld, k_rows + first_key * dims.kv_stride(), dims.kv_stride(),
                      keys, kTile, head_dim);
    load_tile<Format>(tiles.v_tile, ld, v_rows + first_key * dims.kv_stride(), dims.kv_stride(),
                      keys, kTile, head_dim);
    __syncthreads();
    // scores = scale Q K^T
    Math::template gemm<false, true, 4>(scores, score_ld, tiles.q_tile, ld, tiles.k_tile, ld,
                                        kTile, kTile, head_dim, scale, false);
    __syncthreads();
    // Online softmax: new max, probabilities relative to it, rescale of the old sum.
    float* s = scores + my_row * score_ld;
    float tile_max = -INFINITY;
    for (int j = my_part; j < kTile; j += kLanesPerRow) {
      const int key = first_key + j;
      // Future key, an earlier sample's key, or a row past T.
      if (!(my_query < dims.time && key <= my_query && key >= my_start)) s[j] = -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    for (int offset = 1; offset < kLanesPerRow; offset *= 2) {
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xFFFFFFFFu, tile_max, offset));
    }
    const float old_max = row_max[my_row];
    const float new_max = fmaxf(old_max, tile_max);
    const float reference = new_max == -INFINITY ? 0.0f : new_max;  // rows past T: no NaN
    float tile_sum = 0.0f;
    for (int j = my_part; j < kTile; j += kLanesPerRow) {
      const float p = expf(s[j] - reference);  // e^-inf = 0 for masked keys
      s[j] = p;
      tile_sum += p;
    }
    for (int offset = 1; offset < kLanesPerRow; offset *= 2) {
      tile_sum += __shfl_xor_sync(0xFFFFFFFFu, tile_sum, offset);
    }
    const float rescale = old_max == -INFINITY ? 0.0f : expf(old_max - reference);
    __syncwarp();  // the row's lanes have all read row_max/row_sum before lane 0 writes
    if (my_part == 0) {
      row_max[my_row] = new_max;
      row_sum[my_row] = row_sum[my_row] * rescale + tile_sum;
      row_rescale[my_row] = rescale;
    }
    __syncthreads();
    // o_acc = rescale * o_acc + P V (fp32: the weights V gets are the ones backward recomputes).
    Math::template gemm<false, false, 4>(o_acc, acc_ld, tiles.probs, tiles.probs_ld,
                                         tiles.v_tile, ld, kTile, head_dim, kTile, 1.0f, true,
                                         row_rescale);
  }
  __syncthreads();
  // out = o_acc / sum, lse = max + log(sum)
  for (int e = threadIdx.x; e < queries * head_dim; e += blockDim.x) {
    const int r = e / head_dim, c = e % head_dim;
    o_acc[r * acc_ld + c] /= row_sum[r];
  }
  __syncthreads();
  store_tile<Format>(out + dims.q_offset(b, head) + first_query * dims.q_stride(), dims.q_stride(),
                     o_acc, acc_ld, queries, head_dim);
  for (int r = threadIdx.x; r < queries; r += blockDim.x) {
    lse[dims.lse_offset(b, head) + first_query + r] = row_max[r] + logf(row_sum[r]);
  }
}

// ---- tensor cores ----------------------------------------------------------------------------
// One block of 4 warps per (128-query tile, head, batch); warp w owns the queries
// [first_query + 32 w, + 32) as two row tiles of 16, and their output accumulators in registers
// (at D 112 one row tile a warp, 64-query blocks: tc_query_row_tiles).
// Per 32-key tile, each warp: S = Q_w K^T (accumulators), the online softmax on the elements each
// lane holds, O_w = rescale O_w + P V with P packed into A operands in registers. Each K and V operand
// a warp loads from shared memory serves both its row tiles, as in FlashAttention-2 (a warp of 16
// rows loaded one for each 16 x 8 product: ncu found those kernels latency-bound, 2026-11-28,
// with the shared-memory pipe the busiest). Q stays in shared memory and its operands are loaded
// at each key tile (holding them would take 64 registers at D 128). The block shares the Q tile
// and the K and V tiles, double-buffered: the next tiles' asynchronous copies are in flight while
// the warps multiply the current ones. A warp skips the key tiles all its rows are before (the
// diagonal's later tiles) or after (in packed rows, the tiles before its first row's sample),
// which would change nothing of its state: every probability 0, every max kept.
//
// The rounding (issue 15): the weights V gets must sum to 1 as the weights backward recomputes
// from lse do, else delta = rowsum(dO * out) misses V's common component (OPT's v_proj bias) by
// the rounding's residue, and dS = P (dP - delta), whose rows cancel that component, keeps it.
// P goes into P V rounded once to the dtype, as FlashAttention-2 does, and out is normalised by
// the sum of the rounded values (SoftmaxRow::kept), lse by the exact sum: both sets of weights
// sum to 1, so the common component cancels in dS up to out's own rounding to 16 bits (delta
// reads the stored out, in every 16-bit implementation alike), and out misses only the small
// part's rounding (common_value_component_through_each_backends_own_forward bounds it;
// FlashAttention-2 normalises by the exact sum). Until 2026-11-29, P went in as high + low 16-bit
// parts, half again the tensor work of the tile.

// The forward kernel's shared memory for head dim kD, the same on the host (its size) and the
// device: 70 KB a block at D 128, two blocks per SM on an A100 (164 KB) as on an H100.
template <int kD>
struct ForwardTcShared {
  static constexpr int kKeys = kTcForwardKeys;
  static constexpr int kLd = operand_ld(kD);  // Q, K and V tiles
  static constexpr int kTileElements = kKeys * kLd;
  static constexpr int kRows = tc_query_rows(kD);  // the block's queries: 128 (64 at D 112)
  uint16_t* q_tile;  // [kRows, kLd]: warp w's queries are rows [32 w, 32 w + 32) (16 at D 112)
  // [2 buffers][K, V][kKeys, kLd]; one array indexed by arithmetic (an array of pointers
  // indexed by the run-time buffer number would live in local memory)
  uint16_t* kv_tiles;
  SharedLayout layout;

  __host__ __device__ explicit ForwardTcShared(void* base) : layout(base) {
    q_tile = layout.take<uint16_t>(size_t{kRows} * kLd);
    kv_tiles = layout.take<uint16_t>(size_t{4} * kTileElements);
  }
  __device__ uint16_t* k_tile(int buffer) const { return kv_tiles + 2 * buffer * kTileElements; }
  __device__ uint16_t* v_tile(int buffer) const { return kv_tiles + (2 * buffer + 1) * kTileElements; }
};

// The online softmax state of one of the two rows a lane holds in a row tile (g and g + 8 of its
// 16); the row's 4 lanes (t = 0..3) hold the same max, each its own part of the sum.
struct SoftmaxRow {
  int query;
  int start;  // the row's first key; INT_MAX past T (a start no key reaches: every key masked)
  float max = -INFINITY;
  float sum = 0.0f;   // of this lane's probabilities (lse's, which backward recomputes P from)
  float kept = 0.0f;  // of the same rounded to the dtype, the weights P V takes (out's normaliser)
};

// One key tile of the online softmax for a row tile of a warp: from s[kN][4] ([16, 8 kN] Q K^T,
// unscaled), p[kN / 2] = the probabilities relative to each row's new max, rounded to the dtype
// and packed as P V's A operands (a_register); the running max (of the unscaled scores: the scale is
// positive) and both sums are updated, and the output accumulators o are rescaled to the new
// max. `masked` (the same in every lane): some row of the warp does not see some key of the tile
// (the diagonal tile, a sample's start, rows past T); the other tiles skip the mask.
template <class Format, int kN, int kDN>
__device__ inline void softmax_tile(SoftmaxRow (&rows)[2], float (&s)[kN][4], uint32_t (&p)[kN / 2][4],
                                    float (&o)[kDN][4], int first_key, float scale_log2, bool masked) {
  if (masked) mask_tile(rows, s, first_key);  // (a branch around the loop: one way per warp)
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // row g, then g + 8
    SoftmaxRow& my = rows[h];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) tile_max = fmaxf(tile_max, s[j][e]);
    }
    // the row's 4 lanes
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xFFFFFFFFu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xFFFFFFFFu, tile_max, 2));
    const float new_max = fmaxf(my.max, tile_max);
    // in log2 units, scaled; rows past T: no NaN
    const float reference = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
    // (exactly 1 where the max stays: the output's rescale below is skipped then)
    const float factor = my.max == new_max    ? 1.0f
                         : my.max == -INFINITY ? 0.0f
                                               : exp2_flushed(my.max * scale_log2 - reference);
    float sum = 0.0f, kept = 0.0f;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      // 0 for masked keys
      const float first = exp2_flushed(fmaf(s[j][2 * h], scale_log2, -reference));
      const float second = exp2_flushed(fmaf(s[j][2 * h + 1], scale_log2, -reference));
      float first_kept, second_kept;  // as P V's A operand takes them
      p[j / 2][a_register(j, h)] = pack_pair_rounded<Format>(first, second, first_kept, second_kept);
      sum += first;
      sum += second;
      kept += first_kept;
      kept += second_kept;
    }
    my.max = new_max;
    my.sum = my.sum * factor + sum;
    my.kept = my.kept * factor + kept;
    // The row's output follows only when some row's max moved (factor 1: skipping changes no
    // bit). Past a row's first tiles its max seldom moves, and the rescale is kD / 4 multiplies
    // a lane against the tile's kN exponentials. A vote, so the warp takes one way.
    if (__any_sync(0xFFFFFFFFu, factor != 1.0f)) {
#pragma unroll
      for (int j = 0; j < kDN; ++j) {
        o[j][2 * h] *= factor;
        o[j][2 * h + 1] *= factor;
      }
    }
  }
}

// One key tile of a warp's kM row tiles (two; one at D 112): S [16 kM, kKeys] = Q_w [16 kM, kD]
// K^T [kD, kKeys] with each K operand serving every row tile, the online softmax, O_w [16 kM, kD]
// += P [16 kM, kKeys] V [kKeys, kD] with P rounded to the dtype, each V operand serving every row
// tile. q_warp: the warp's rows of the block's Q tile in shared memory.
template <class Format, int kD, int kM, int kDN>
__device__ inline void forward_tc_tile(SoftmaxRow (&rows)[kM][2], float (&o)[kM][kDN][4], const uint16_t* q_warp,
                                       const uint16_t* k_tile, const uint16_t* v_tile, int first_key,
                                       float scale_log2) {
  constexpr int kKeys = kTcForwardKeys, kN = kKeys / 8, kLd = operand_ld(kD);
  float s[kM][kN][4];
#pragma unroll
  for (int m = 0; m < kM; ++m) zero_fragments(s[m]);
  mma_shared_a_bt<MmaType<Format>, kD>(s, q_warp, kLd, k_tile, kLd);
  bool whole = true;  // every row of this lane sees every key of the tile
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const SoftmaxRow& row = rows[m][h];
      whole = whole && sees_whole_tile(row.query, row.start, first_key, kKeys);  // (past T: no key)
    }
  }
  const bool masked = !__all_sync(0xFFFFFFFFu, whole);
  uint32_t p[kM][kN / 2][4];  // P [16 kM, kKeys] as A operands, rounded to the dtype
#pragma unroll
  for (int m = 0; m < kM; ++m) softmax_tile<Format>(rows[m], s[m], p[m], o[m], first_key, scale_log2, masked);
  mma_operands_b<MmaType<Format>>(o, p, v_tile, kLd);
}

// Two blocks per SM: a thread's 255 registers hold the warp's two row tiles of output (128 at
// D 128), scores (32) and probabilities (16); ptxas (CUDA 13, sm_80 and sm_90) spills nothing.
template <class Format, int kD>
__global__ void __launch_bounds__(kTcThreads, 2)
attention_forward_tc_kernel(Storage<Format>* out, float* lse, const Storage<Format>* q,
                            const Storage<Format>* k, const Storage<Format>* v,
                            const int32_t* positions, AttentionDims dims, float scale) {
  using Shared = ForwardTcShared<kD>;
  constexpr int kKeys = Shared::kKeys, kLd = Shared::kLd, kRows = Shared::kRows;
  constexpr int kM = tc_query_row_tiles(kD), kDN = kD / 8;  // row tiles, n-tiles of O
  ZT_DYNAMIC_SHARED(float, shared_memory);
  Shared shared(SharedLayout::aligned(shared_memory));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int tiles_count = (dims.time + kRows - 1) / kRows;
  const BlockTile block = block_tile();
  const int tile = tiles_count - 1 - block.order;  // the longest rows first
  const int head = block.head, b = block.b, kv_head = head / dims.group();
  const int first_query = tile * kRows;
  const int warp_query = first_query + warp * kM * kWarpRows;  // this warp's first row
  // The keys this warp's rows see lie in [warp_first_key, warp_last_key]: from its first row's
  // sample start (starts never decrease along a row) to its last row (causal); none for a warp
  // past T (the last block's).
  const bool warp_valid = warp_query < dims.time;
  const int warp_first_key = warp_valid ? sample_start(positions, dims, b, warp_query) : 0;
  const int warp_last_key = warp_valid ? min(warp_query + kM * kWarpRows, dims.time) - 1 : -1;
  const int64_t q_stride = dims.q_stride(), kv_stride = dims.kv_stride();
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);

  float o[kM][kDN][4];  // [16 kM, kD]: this warp's unnormalised output, row tile m its rows 16 m ..
  SoftmaxRow rows[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    zero_fragments(o[m]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      SoftmaxRow& row = rows[m][h];
      row.query = warp_query + kWarpRows * m + lane / 4 + 8 * h;
      row.start = row.query < dims.time ? sample_start(positions, dims, b, row.query) : INT_MAX;
    }
  }

  // Causal within samples: keys [start of the block's first query's sample, last query]; key
  // tiles stay aligned to kKeys. Q [kRows, kD] and the first K, V tiles go as one copy group.
  const int keys_begin = sample_start(positions, dims, b, first_query) / kKeys * kKeys;
  const int keys_end = min(dims.time, first_query + kRows);
  copy_tile_async<kRows, kD>(shared.q_tile, kLd, q + dims.q_offset(b, head) + first_query * q_stride, q_stride,
                             min(kRows, dims.time - first_query));
  copy_tile_pair_async<kKeys, kD>(shared.k_tile(0), shared.v_tile(0), kLd,
                                  k_rows + keys_begin * kv_stride, v_rows + keys_begin * kv_stride,
                                  kv_stride, min(kKeys, dims.time - keys_begin));
  async_copy_wait<0>();
  __syncthreads();  // Q and the first K, V tiles are in place
  const uint16_t* q_warp = shared.q_tile + warp * kM * kWarpRows * kLd;  // [16 kM, kLd]
  int buffer = 0;
  for (int first_key = keys_begin; first_key < keys_end; first_key += kKeys, buffer ^= 1) {
    const int next_key = first_key + kKeys;
    // The next K, V tiles on their way into the other buffer (its last readers passed the
    // barrier that ended the previous step).
    if (next_key < keys_end) {
      copy_tile_pair_async<kKeys, kD>(shared.k_tile(buffer ^ 1), shared.v_tile(buffer ^ 1), kLd,
                                      k_rows + next_key * kv_stride, v_rows + next_key * kv_stride,
                                      kv_stride, min(kKeys, dims.time - next_key));
    }
    // (the same in every lane)
    if (first_key <= warp_last_key && first_key + kKeys > warp_first_key) {
      forward_tc_tile<Format, kD>(rows, o, q_warp, shared.k_tile(buffer), shared.v_tile(buffer), first_key,
                                  scale * kLog2e);
    }
    async_copy_wait<0>();
    __syncthreads();  // the next tile is in place; every warp is done with this one
  }
  // out = O_w / sum, lse = scale max + log(sum) (the sum over the row's 4 lanes)
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float normaliser[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      SoftmaxRow& my = rows[m][h];
      my.sum += __shfl_xor_sync(0xFFFFFFFFu, my.sum, 1);
      my.sum += __shfl_xor_sync(0xFFFFFFFFu, my.sum, 2);
      my.kept += __shfl_xor_sync(0xFFFFFFFFu, my.kept, 1);
      my.kept += __shfl_xor_sync(0xFFFFFFFFu, my.kept, 2);
      const bool valid = my.query < dims.time;
      normaliser[h] = valid ? 1.0f / my.kept : 0.0f;  // weights that sum to 1 as rounded
      // ln(sum 2^(x - reference)) + reference ln 2, reference = max scale log2(e) as the softmax's
      if (valid && lane % 4 == 0)
        lse[dims.lse_offset(b, head) + my.query] = (my.max * (scale * kLog2e) + log2f(my.sum)) * kLn2;
    }
    const int tile_query = warp_query + kWarpRows * m;
    store_fragments<Format>(out + dims.q_offset(b, head) + tile_query * q_stride, q_stride, o[m], normaliser,
                            max(0, min(kWarpRows, dims.time - tile_query)));
  }
}

template <class Format>
void launch_forward_tc(const CudaBackendImpl& backend, cudaStream_t stream, const char* op,
                       Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const int32_t* positions, const AttentionDims& dims,
                       float scale_factor) {
  with_head_dim(dims.head_dim, [&](auto head_dim) {
    constexpr int kD = decltype(head_dim)::value;
    const size_t shared_bytes = ForwardTcShared<kD>(nullptr).layout.launch_bytes();
    auto kernel = attention_forward_tc_kernel<Format, kD>;
    allow_shared_memory(backend, op, kernel, shared_bytes, dims.head_dim);
    const dim3 grid = tile_grid(op, dims.time, ForwardTcShared<kD>::kRows, dims.heads, dims.batch);
    launch({grid, kTcThreads, shared_bytes, stream}, kernel, data_of<Format>(out), lse.f32(),
           data_of<Format>(q), data_of<Format>(k), data_of<Format>(v), positions, dims,
           scale_factor);
    ZT_CUDA_CHECK_LAUNCH("attention_forward_tc_kernel");
  });
}

template <class Math>
size_t forward_shared_bytes(int head_dim) {
  return ForwardShared<Math>(nullptr, head_dim).layout.launch_bytes();
}

template <class Format, class Math>
void launch_forward(const CudaBackendImpl& backend, cudaStream_t stream, const char* op,
                    Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                    const int32_t* positions, const AttentionDims& dims, float scale_factor) {
  const size_t shared_bytes = forward_shared_bytes<Math>(dims.head_dim);
  auto kernel = attention_forward_kernel<Format, Math>;
  allow_shared_memory(backend, op, kernel, shared_bytes, dims.head_dim);
  const dim3 grid = tile_grid(op, dims.time, kForwardTile, dims.heads, dims.batch);
  launch({grid, kForwardThreads, shared_bytes, stream}, kernel, data_of<Format>(out), lse.f32(),
         data_of<Format>(q), data_of<Format>(k), data_of<Format>(v), positions, dims, scale_factor);
  ZT_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

}  // namespace

void run_attention_forward_kernels(CudaBackendImpl& backend, bool tensor_cores, Tensor out,
                                   Tensor lse, Tensor q, Tensor k, Tensor v,
                                   const int32_t* positions, const AttentionDims& dims, float scale) {
  const char* op = "attention_forward";
  dispatch_float(q.dtype, op, "q", [&](auto format) {
    using Format = decltype(format);
    if constexpr (!std::is_same_v<Format, Fp32Format>) {
      if (tensor_cores && vector_aligned({&out, &q, &k, &v})) {
        launch_forward_tc<Format>(backend, backend.stream(), op, out, lse, q, k, v, positions,
                                  dims, scale);
        return;
      }
    }
    launch_forward<Format, CudaCoreMath<Format>>(backend, backend.stream(), op, out, lse, q, k, v,
                                                 positions, dims, scale);
  });
}

}  // namespace zt::cuda
