// The CUDA backend's causal self-attention with grouped-query heads, forward, in the
// FlashAttention-2 manner: one block per (64-query tile, head, batch) walks the key tiles its
// queries can see with an online softmax (running max and sum per query row), so no T x T
// matrix ever exists; it writes out and the log-sum-exp that backward uses to recompute the
// probabilities. bf16/fp16 with D a multiple of 16 (up to 128) run attention_forward_tc_kernel
// on tensor cores (each warp's accumulators in registers); fp32 and other head dims run
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
  const int tile = tiles_count - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int head = blockIdx.y, b = blockIdx.z;
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
// [first_query + 16 w, + 16). Per 64-key tile, each warp: S = Q_w K^T (fragments), the online
// softmax on its rows in its scratch, P rounded to the dtype, O_w = rescale O_w + P V
// (fragments). The block shares K and V tiles only, double-buffered: the next tile's 16-byte
// loads are in flight while the warps multiply the current one.
//
// The rounding (issue 15): the weights V gets must be the ones backward recomputes from lse,
// else delta = rowsum(dO * out) misses V's common component (OPT's v_proj bias) by the
// rounding's mean, and dS = P (dP - delta), whose rows cancel that component, keeps it. So P goes
// into P V as high + low 16-bit parts (warp_mma_split: the V fragments are loaded once for both).
// A single rounded P normalised by the sum of the rounded values (weights summing to 1) removes
// the bias too, but leaves out about 2^-9 (bf16) of its small part away from the fp32 result:
// enough to flip out's own rounding in a few elements per thousand, each flip moving delta by
// dO times an ulp of out (common_value_component_through_each_backends_own_forward failed on
// 17 to 72 of 6144 elements that way).

// The forward kernel's shared memory for head dim kD, the same on the host (its size) and the
// device.
template <int kD>
struct ForwardTcShared {
  static constexpr int kKeys = kTcForwardKeys;
  static constexpr int kLd = operand_ld(kD);              // K, V and Q tiles
  static constexpr int kScoreLd = scratch_ld(kKeys);      // a warp's fp32 scores
  // The probabilities overwrite their scores: row r of a warp's scratch, seen as 16-bit values
  // with leading dimension kProbLd (= 2 kScoreLd, a multiple of 8), holds P's high parts in
  // [0, kKeys) and its low parts in [kKeys, 2 kKeys) (32-byte aligned for WMMA).
  static constexpr int kProbLd = 2 * kScoreLd;
  static constexpr int kScratchFloats = kWarpRows * kScoreLd;
  uint16_t* q_tile;      // [kTcBlockRows, kLd]: warp w's queries are rows [16 w, 16 w + 16)
  static constexpr int kTileElements = kKeys * kLd;
  // [2 buffers][K, V][kKeys, kLd]; one array indexed by arithmetic (an array of pointers
  // indexed by the run-time buffer number would live in local memory)
  uint16_t* kv_tiles;
  float* scratch;        // [kTcWarps][16, kScoreLd]: a warp's scores, then its probabilities
  float* row_factor;     // [kTcWarps][16]: the rows' rescale factors, at the end their normalisers
  SharedLayout layout;

  __host__ __device__ explicit ForwardTcShared(void* base) : layout(base) {
    q_tile = layout.take<uint16_t>(size_t{kTcBlockRows} * kLd);
    kv_tiles = layout.take<uint16_t>(size_t{4} * kTileElements);
    scratch = layout.take<float>(size_t{kTcWarps} * kScratchFloats);
    row_factor = layout.take<float>(size_t{kTcWarps} * kWarpRows);
  }
  __device__ uint16_t* k_tile(int buffer) const { return kv_tiles + 2 * buffer * kTileElements; }
  __device__ uint16_t* v_tile(int buffer) const { return kv_tiles + (2 * buffer + 1) * kTileElements; }
};

// A warp's softmax state: lane 2r + h looks after row r of its 16 and the columns
// [32 h, 32 h + 32) of each key tile; max is the row's, the sums this lane's half of it.
struct SoftmaxRow {
  int row, half, query, start;
  bool valid;
  float max = -INFINITY;
  float sum = 0.0f;  // of this lane's probabilities
};

// One key tile of the online softmax for a warp's rows: scores[16, kScoreLd] (Q K^T, unscaled)
// -> the probabilities as high and low 16-bit parts in place (kProbLd above), the running max
// and sum updated, and the factor that rescales each row's earlier output in row_factor[16].
template <class Format, int kScoreLd>
__device__ inline void softmax_tile(SoftmaxRow& my, float* scores, float* row_factor,
                                    int first_key, float scale) {
  const float* s = scores + my.row * kScoreLd + my.half * 32;  // [32] this lane's scores
  // Each lane starts its walk at a different column (rotation by 5 r + 16 h mod 32 banks with
  // kScoreLd = 68): the 32 lanes read 32 different banks at every step.
  const int rotation = my.row + 16 * my.half;
  float x[32];  // this lane's scores, then probabilities (x[j] is column (j + rotation) % 32)
  float tile_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int c = (j + rotation) & 31;
    const int key = first_key + my.half * 32 + c;
    // Future key, an earlier sample's key, or a row past T.
    const bool visible = my.valid && key <= my.query && key >= my.start;
    x[j] = visible ? s[c] * scale : -INFINITY;
    tile_max = fmaxf(tile_max, x[j]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xFFFFFFFFu, tile_max, 1));  // the row's 2 lanes
  const float new_max = fmaxf(my.max, tile_max);
  const float reference = new_max == -INFINITY ? 0.0f : new_max;  // rows past T: no NaN
  const float factor = my.max == -INFINITY ? 0.0f : expf(my.max - reference);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    x[j] = expf(x[j] - reference);  // e^-inf = 0 for masked keys
    sum += x[j];
  }
  __syncwarp();  // both lanes of a row have read its scores before either overwrites them
  uint16_t* high = reinterpret_cast<uint16_t*>(scores + my.row * kScoreLd) + my.half * 32;
  uint16_t* low = high + 2 * 32;  // the row's low parts start 64 values after its high parts
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int c = (j + rotation) & 31;
    const uint16_t rounded = Format::from_float(x[j]);
    high[c] = rounded;
    low[c] = Format::from_float(x[j] - Format::to_float(rounded));
  }
  my.max = new_max;
  my.sum = my.sum * factor + sum;
  if (my.half == 0) row_factor[my.row] = factor;
}

template <class Format, int kD>
__global__ void __launch_bounds__(kTcThreads, 2)
attention_forward_tc_kernel(Storage<Format>* out, float* lse, const Storage<Format>* q,
                            const Storage<Format>* k, const Storage<Format>* v,
                            const int32_t* positions, AttentionDims dims, float scale) {
  using T = WmmaType<Format>;
  using Shared = ForwardTcShared<kD>;
  constexpr int kKeys = Shared::kKeys, kLd = Shared::kLd, kF = kD / 16;
  ZT_DYNAMIC_SHARED(float, shared_memory);
  Shared shared(SharedLayout::aligned(shared_memory));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* scores = shared.scratch + warp * Shared::kScratchFloats;         // [16, kScoreLd]
  float* row_factor = shared.row_factor + warp * kWarpRows;              // [16]

  const int tiles_count = (dims.time + kTcBlockRows - 1) / kTcBlockRows;
  const int tile = tiles_count - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int head = blockIdx.y, b = blockIdx.z, kv_head = head / dims.group();
  const int first_query = tile * kTcBlockRows;
  const int warp_query = first_query + warp * kWarpRows;  // this warp's first row
  const int64_t q_stride = dims.q_stride(), kv_stride = dims.kv_stride();
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);
  const int warp_valid = max(0, min(kWarpRows, dims.time - warp_query));

  // Q [64, kD] stays in shared memory (the warps' accumulators need the registers).
  copy_rows<kD>(shared.q_tile, kLd, q + dims.q_offset(b, head) + first_query * q_stride,
                q_stride, min(kTcBlockRows, dims.time - first_query), kTcBlockRows,
                threadIdx.x, kTcThreads);
  const T* q_warp = reinterpret_cast<const T*>(shared.q_tile) + warp * kWarpRows * kLd;  // [16, kLd]
  const FragmentCoordinates at = fragment_coordinates(scores);
  Accumulator o[kF];  // [16, kD]: this warp's unnormalised output
  zero_fragments(o);

  SoftmaxRow my;
  my.row = lane / 2;
  my.half = lane % 2;
  my.query = warp_query + my.row;
  my.valid = my.query < dims.time;
  my.start = my.valid ? sample_start(positions, dims, b, my.query) : 0;

  // Causal within samples: keys [start of the block's first query's sample, last query]; key
  // tiles stay aligned to kKeys.
  const int keys_begin = sample_start(positions, dims, b, first_query) / kKeys * kKeys;
  const int keys_end = min(dims.time, first_query + kTcBlockRows);
  TileStage<kKeys, kD> stage;  // the next K or V tile on its way
  stage.fetch(k_rows + keys_begin * kv_stride, kv_stride, min(kKeys, dims.time - keys_begin));
  stage.commit(shared.k_tile(0), kLd);
  stage.fetch(v_rows + keys_begin * kv_stride, kv_stride, min(kKeys, dims.time - keys_begin));
  stage.commit(shared.v_tile(0), kLd);
  __syncthreads();
  int buffer = 0;
  for (int first_key = keys_begin; first_key < keys_end; first_key += kKeys, buffer ^= 1) {
    const int next_key = first_key + kKeys;
    const bool has_next = next_key < keys_end;
    const int next_valid = min(kKeys, dims.time - next_key);
    const T* k_tile = reinterpret_cast<const T*>(shared.k_tile(buffer));  // [kKeys, kLd]
    const T* v_tile = reinterpret_cast<const T*>(shared.v_tile(buffer));  // [kKeys, kLd]
    if (has_next) stage.fetch(k_rows + next_key * kv_stride, kv_stride, next_valid);
    // S [16, kKeys] = Q_w [16, kD] K^T [kD, kKeys]
    Accumulator s[kKeys / 16];
    zero_fragments(s);
    warp_mma<kD, kKeys / 16, true>(s, q_warp, kLd, k_tile, kLd);
#pragma unroll
    for (int c = 0; c < kKeys / 16; ++c) {
      wmma::store_matrix_sync(scores + c * 16, s[c], Shared::kScoreLd, wmma::mem_row_major);
    }
    // Nobody reads the other buffer during this step (its last readers passed the barrier
    // that ended the previous one).
    if (has_next) stage.commit(shared.k_tile(buffer ^ 1), kLd);
    if (has_next) stage.fetch(v_rows + next_key * kv_stride, kv_stride, next_valid);
    __syncwarp();
    softmax_tile<Format, Shared::kScoreLd>(my, scores, row_factor, first_key, scale);
    __syncwarp();
    // O_w [16, kD] = factor O_w + (P_high + P_low) [16, kKeys] V [kKeys, kD]
    scale_rows(o, row_factor, at);
    const T* p_high = reinterpret_cast<const T*>(scores);  // [16, kProbLd]
    warp_mma_split<kKeys, kF>(o, p_high, p_high + kKeys, Shared::kProbLd, v_tile, kLd);
    if (has_next) stage.commit(shared.v_tile(buffer ^ 1), kLd);
    __syncthreads();  // the next tile is in place; every warp is done with this one
  }
  // out = O_w / sum, lse = max + log(sum)
  my.sum += __shfl_xor_sync(0xFFFFFFFFu, my.sum, 1);
  if (my.half == 0) {
    row_factor[my.row] = my.valid ? 1.0f / my.sum : 0.0f;
    if (my.valid) lse[dims.lse_offset(b, head) + my.query] = my.max + logf(my.sum);
  }
  __syncwarp();
  scale_rows(o, row_factor, at);
  store_warp_rows<Format, kD, kKeys>(out + dims.q_offset(b, head) + warp_query * q_stride,
                                     q_stride, o, scores, warp_valid);
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
    const dim3 grid(tiles_of(dims.time, kTcBlockRows), static_cast<unsigned int>(dims.heads),
                    static_cast<unsigned int>(dims.batch));
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
  const dim3 grid(tiles_of(dims.time, kForwardTile), static_cast<unsigned int>(dims.heads),
                  static_cast<unsigned int>(dims.batch));
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
