// The CUDA backend's causal self-attention with grouped-query heads, forward, in the
// FlashAttention-2 manner: one block per (64-query tile, head, batch) walks the key tiles its
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
// One block of 4 warps per (64-query tile, head, batch); warp w owns the queries
// [first_query + 16 w, + 16), its Q operands and its output accumulators in registers. Per
// 32-key tile, each warp: S = Q_w K^T (accumulators), the online softmax on the elements each
// lane holds, O_w = rescale O_w + P V with P fed back from the accumulators. The block shares
// the K and V tiles only, double-buffered: the next tiles' asynchronous copies are in flight
// while the warps multiply the current ones. 32-key tiles keep a warp's S in 16 registers, so
// the kernel fits 168 registers and three blocks (12 warps) run per SM: ncu found the 8 warps
// of two 64-key blocks latency-bound (issue slots 43% busy, 2026-11-28).
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
// device.
template <int kD>
struct ForwardTcShared {
  static constexpr int kKeys = kTcForwardKeys;
  static constexpr int kLd = operand_ld(kD);  // K, V and Q tiles
  static constexpr int kTileElements = kKeys * kLd;
  // Q [kTcBlockRows, kLd] passes through buffer 1's K and V tiles (consecutive) on its way into
  // registers, before the first prefetch into that buffer: 35 KB a block at D 128, so shared
  // memory allows three blocks per SM on an A100 (164 KB) as on an H100.
  static_assert(2 * kKeys >= kTcBlockRows, "Q's tile fits in buffer 1's K and V tiles");
  // [2 buffers][K, V][kKeys, kLd]; one array indexed by arithmetic (an array of pointers
  // indexed by the run-time buffer number would live in local memory)
  uint16_t* kv_tiles;
  SharedLayout layout;

  __host__ __device__ explicit ForwardTcShared(void* base) : layout(base) {
    kv_tiles = layout.take<uint16_t>(size_t{4} * kTileElements);
  }
  __device__ uint16_t* k_tile(int buffer) const { return kv_tiles + 2 * buffer * kTileElements; }
  __device__ uint16_t* v_tile(int buffer) const { return kv_tiles + (2 * buffer + 1) * kTileElements; }
  // [kTcBlockRows, kLd]: warp w's queries are rows [16 w, 16 w + 16); valid until the first
  // prefetch into buffer 1
  __device__ uint16_t* q_tile() const { return k_tile(1); }
};

// The online softmax state of one of the two rows a lane holds (g and g + 8 of its warp's 16);
// the row's 4 lanes (t = 0..3) hold the same max, each its own part of the sum.
struct SoftmaxRow {
  int query, start;
  bool valid;
  float max = -INFINITY;
  float sum = 0.0f;   // of this lane's probabilities (lse's, which backward recomputes P from)
  float kept = 0.0f;  // of the same rounded to the dtype, the weights P V takes (out's normaliser)
};

// One key tile of the online softmax for a warp: s[kN][4] ([16, 8 kN] Q K^T, unscaled) becomes
// the probabilities relative to each row's new max, rounded to the dtype as P V takes them; the
// running max (of the unscaled scores: the scale is positive) and both sums are updated, and the
// output accumulators o are rescaled to the new max. `masked` (the same in every lane): some row of the warp does not see some key of the
// tile (the diagonal tile, a sample's start, rows past T); the other tiles skip the mask.
template <int kN>
__device__ inline void mask_tile(const SoftmaxRow (&rows)[2], float (&s)[kN][4], int first_key) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const SoftmaxRow& my = rows[e / 2];
      const int key = first_key + fragment_col(j, e);
      // Future key, an earlier sample's key, or a row past T.
      if (!(my.valid && key <= my.query && key >= my.start)) s[j][e] = -INFINITY;
    }
  }
}

template <class Format, int kN, int kDN>
__device__ inline void softmax_tile(SoftmaxRow (&rows)[2], float (&s)[kN][4], float (&o)[kDN][4],
                                    int first_key, float scale_log2, bool masked) {
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
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        const float p = exp2_flushed(fmaf(s[j][e], scale_log2, -reference));  // 0 for masked keys
        s[j][e] = Format::to_float(Format::from_float(p));  // as P V's A operand takes it
        sum += p;
        kept += s[j][e];
      }
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

// tc_blocks_per_sm: three blocks a SM at 168 registers. Four (128 registers) spill at D 96-128
// (up to 236 bytes).
template <class Format, int kD>
__global__ void __launch_bounds__(kTcThreads, tc_blocks_per_sm(kD))
attention_forward_tc_kernel(Storage<Format>* out, float* lse, const Storage<Format>* q,
                            const Storage<Format>* k, const Storage<Format>* v,
                            const int32_t* positions, AttentionDims dims, float scale) {
  using T = MmaType<Format>;
  using Shared = ForwardTcShared<kD>;
  constexpr int kKeys = Shared::kKeys, kLd = Shared::kLd;
  constexpr int kN = kKeys / 8, kDN = kD / 8;  // n-tiles of S and of O
  ZT_DYNAMIC_SHARED(float, shared_memory);
  Shared shared(SharedLayout::aligned(shared_memory));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int tiles_count = (dims.time + kTcBlockRows - 1) / kTcBlockRows;
  const BlockTile block = block_tile();
  const int tile = tiles_count - 1 - block.order;  // the longest rows first
  const int head = block.head, b = block.b, kv_head = head / dims.group();
  const int first_query = tile * kTcBlockRows;
  const int warp_query = first_query + warp * kWarpRows;  // this warp's first row
  const int64_t q_stride = dims.q_stride(), kv_stride = dims.kv_stride();
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);

  // Q [64, kD] goes to registers through shared memory (ldmatrix gives the operand layout).
  copy_rows<kD>(shared.q_tile(), kLd, q + dims.q_offset(b, head) + first_query * q_stride,
                q_stride, min(kTcBlockRows, dims.time - first_query), kTcBlockRows,
                threadIdx.x, kTcThreads);
  float o[kDN][4];  // [16, kD]: this warp's unnormalised output
  zero_fragments(o);
  SoftmaxRow rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows[h].query = warp_query + lane / 4 + 8 * h;
    rows[h].valid = rows[h].query < dims.time;
    rows[h].start = rows[h].valid ? sample_start(positions, dims, b, rows[h].query) : 0;
  }

  // Causal within samples: keys [start of the block's first query's sample, last query]; key
  // tiles stay aligned to kKeys.
  const int keys_begin = sample_start(positions, dims, b, first_query) / kKeys * kKeys;
  const int keys_end = min(dims.time, first_query + kTcBlockRows);
  copy_tile_pair_async<kKeys, kD>(shared.k_tile(0), shared.v_tile(0), kLd,
                                  k_rows + keys_begin * kv_stride, v_rows + keys_begin * kv_stride,
                                  kv_stride, min(kKeys, dims.time - keys_begin));
  async_copy_wait<0>();
  __syncthreads();  // Q and the first K, V tiles are in place
  uint32_t q_operands[kD / 16][4];  // Q_w [16, kD] as A operands
  load_a_operands<kD>(q_operands, shared.q_tile() + warp * kWarpRows * kLd, kLd);
  __syncthreads();  // every warp holds its Q operands: the first prefetch may overwrite Q's tile
  int buffer = 0;
  for (int first_key = keys_begin; first_key < keys_end; first_key += kKeys, buffer ^= 1) {
    const int next_key = first_key + kKeys;
    const bool has_next = next_key < keys_end;
    const uint16_t* k_tile = shared.k_tile(buffer);  // [kKeys, kLd]
    const uint16_t* v_tile = shared.v_tile(buffer);  // [kKeys, kLd]
    // The next K, V tiles on their way into the other buffer (its last readers passed the
    // barrier that ended the previous step).
    if (has_next) {
      copy_tile_pair_async<kKeys, kD>(shared.k_tile(buffer ^ 1), shared.v_tile(buffer ^ 1), kLd,
                                      k_rows + next_key * kv_stride, v_rows + next_key * kv_stride,
                                      kv_stride, min(kKeys, dims.time - next_key));
    }
    // S [16, kKeys] = Q_w [16, kD] K^T [kD, kKeys]
    float s[kN][4];
    zero_fragments(s);
    mma_a_bt<T, kD, kN>(s, q_operands, k_tile, kLd);
    const bool masked = !__all_sync(0xFFFFFFFFu, sees_whole_tile(rows[0].valid, rows[0].query, rows[0].start, first_key, kKeys) &&
                                                     sees_whole_tile(rows[1].valid, rows[1].query, rows[1].start, first_key, kKeys));
    softmax_tile<Format>(rows, s, o, first_key, scale * kLog2e, masked);
    // O_w [16, kD] += P [16, kKeys] V [kKeys, kD], P rounded to the dtype
    mma_accumulators_b<Format>(o, s, v_tile, kLd);
    async_copy_wait<0>();
    __syncthreads();  // the next tile is in place; every warp is done with this one
  }
  // out = O_w / sum, lse = scale max + log(sum) (the sum over the row's 4 lanes)
  float normaliser[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    SoftmaxRow& my = rows[h];
    my.sum += __shfl_xor_sync(0xFFFFFFFFu, my.sum, 1);
    my.sum += __shfl_xor_sync(0xFFFFFFFFu, my.sum, 2);
    my.kept += __shfl_xor_sync(0xFFFFFFFFu, my.kept, 1);
    my.kept += __shfl_xor_sync(0xFFFFFFFFu, my.kept, 2);
    normaliser[h] = my.valid ? 1.0f / my.kept : 0.0f;  // weights that sum to 1 as rounded
    // ln(sum 2^(x - reference)) + reference ln 2, reference = max scale log2(e) as the softmax's
    if (my.valid && lane % 4 == 0)
      lse[dims.lse_offset(b, head) + my.query] = (my.max * (scale * kLog2e) + log2f(my.sum)) * kLn2;
  }
  store_fragments<Format>(out + dims.q_offset(b, head) + warp_query * q_stride, q_stride, o,
                          normaliser, max(0, min(kWarpRows, dims.time - warp_query)));
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
    const dim3 grid = tile_grid(op, dims.time, kTcBlockRows, dims.heads, dims.batch);
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
