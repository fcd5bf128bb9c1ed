// The CUDA backend's causal self-attention with grouped-query heads, forward, in the
// FlashAttention-2 manner: one block per (64-query tile, head, batch) holds its queries in shared
// memory and walks the key tiles they can see with an online softmax (running max and sum per
// query row), so no T x T matrix ever exists; it writes out and the log-sum-exp that backward
// uses to recompute the probabilities. fp32 arithmetic on CUDA cores (a correct tiled version;
// tensor-core MMA tiles are the next step for speed).
#include "backend/cuda/cuda_attention.cuh"

namespace zt::cuda {

namespace {

using namespace attention;

template <class Format>
__global__ void __launch_bounds__(kForwardThreads)
attention_forward_kernel(Storage<Format>* out, float* lse, const Storage<Format>* q,
                         const Storage<Format>* k, const Storage<Format>* v,
                         const int32_t* positions, AttentionDims dims, float scale) {
  constexpr int kTile = kForwardTile;
  constexpr int kScoreLd = kTile + 1;
  ZT_DYNAMIC_SHARED(float, shared);
  const int head_dim = dims.head_dim, ld = head_dim + 1;
  float* q_tile = shared;                       // [kTile, ld]
  float* k_tile = q_tile + kTile * ld;          // [kTile, ld]
  float* v_tile = k_tile + kTile * ld;          // [kTile, ld]
  float* o_acc = v_tile + kTile * ld;           // [kTile, ld]: unnormalised output
  float* scores = o_acc + kTile * ld;           // [kTile, kScoreLd]: scores, then probabilities
  float* row_max = scores + kTile * kScoreLd;   // [kTile]
  float* row_sum = row_max + kTile;             // [kTile]
  float* row_rescale = row_sum + kTile;         // [kTile]

  const int tiles = (dims.time + kTile - 1) / kTile;
  const int tile = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int head = blockIdx.y, b = blockIdx.z;
  const int kv_head = head / dims.group();
  const int first_query = tile * kTile;
  const int queries = min(kTile, dims.time - first_query);
  const Storage<Format>* q_rows = q + dims.q_offset(b, head) + first_query * dims.q_stride();
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);

  load_tile<Format>(q_tile, ld, q_rows, dims.q_stride(), queries, kTile, head_dim);
  zero(o_acc, kTile * ld);
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
    load_tile<Format>(k_tile, ld, k_rows + first_key * dims.kv_stride(), dims.kv_stride(), keys,
                      kTile, head_dim);
    load_tile<Format>(v_tile, ld, v_rows + first_key * dims.kv_stride(), dims.kv_stride(), keys,
                      kTile, head_dim);
    __syncthreads();
    // scores = scale Q K^T
    block_gemm<false, true, 4>(scores, kScoreLd, q_tile, ld, k_tile, ld, kTile, kTile, head_dim,
                               scale, false);
    __syncthreads();
    // Online softmax: new max, probabilities relative to it, rescale of the old sum.
    float* s = scores + my_row * kScoreLd;
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
    // o_acc = rescale * o_acc + P V
    block_gemm<false, false, 4>(o_acc, ld, scores, kScoreLd, v_tile, ld, kTile, head_dim, kTile,
                                1.0f, true, row_rescale);
  }
  __syncthreads();
  // out = o_acc / sum, lse = max + log(sum)
  for (int e = threadIdx.x; e < queries * head_dim; e += blockDim.x) {
    const int r = e / head_dim, c = e % head_dim;
    o_acc[r * ld + c] /= row_sum[r];
  }
  __syncthreads();
  store_tile<Format>(out + dims.q_offset(b, head) + first_query * dims.q_stride(), dims.q_stride(),
                     o_acc, ld, queries, head_dim);
  for (int r = threadIdx.x; r < queries; r += blockDim.x) {
    lse[dims.lse_offset(b, head) + first_query + r] = row_max[r] + logf(row_sum[r]);
  }
}

size_t forward_shared_bytes(int head_dim) {
  const size_t ld = static_cast<size_t>(head_dim) + 1;
  return (4 * kForwardTile * ld + kForwardTile * (kForwardTile + 1) + 3 * kForwardTile) *
         sizeof(float);
}


}  // namespace

void CudaBackendImpl::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                        Tensor positions, float scale_factor) {
  const char* op = "attention_forward";
  const AttentionDims dims = check_attention(op, q, k, v, out, "out", lse);
  const int32_t* position_of = positions_data(op, positions, dims.batch, dims.time);
  if (dims.batch == 0 || dims.time == 0 || dims.heads == 0) return;
  const size_t shared_bytes = forward_shared_bytes(dims.head_dim);
  dispatch_float(q.dtype, op, "q", [&](auto format) {
    using Format = decltype(format);
    auto kernel = attention_forward_kernel<Format>;
    allow_shared_memory(*this, op, kernel, shared_bytes, dims.head_dim);
    const dim3 grid(tiles_of(dims.time, kForwardTile), static_cast<unsigned int>(dims.heads),
                    static_cast<unsigned int>(dims.batch));
    launch({grid, kForwardThreads, shared_bytes, stream_}, kernel,
        data_of<Format>(out), lse.f32(), data_of<Format>(q), data_of<Format>(k),
        data_of<Format>(v), position_of, dims, scale_factor);
    ZT_CUDA_CHECK_LAUNCH("attention_forward_kernel");
  });
}


}  // namespace zt::cuda
