// The CUDA backend's causal grouped-query attention, backward, in the FlashAttention-2 manner:
// the probabilities are recomputed tile by tile from the saved log-sum-exp. Deterministic
// without atomics: one kernel computes dK/dV with one block per (32-key tile, kv head, batch),
// looping over the query heads of its group and the query tiles in a fixed order; another
// computes dQ with one block per (32-query tile, head, batch) looping over key tiles. Each block
// owns the rows it writes. fp32 arithmetic on CUDA cores.
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

// The shared middle of both backward kernels, for one (query tile, key tile) pair:
// probs = P = exp(scale Q K^T - lse) on visible keys (0 elsewhere), dprobs = dS = P (dO V^T - delta).
__device__ inline void probabilities_and_gradients(float* probs, float* dprobs, int score_ld,
                                                   const float* q_tile, const float* do_tile,
                                                   const float* k_tile, const float* v_tile,
                                                   int ld, const float* lse_tile,
                                                   const float* delta_tile, const int* start_tile,
                                                   int first_query,
                                                   int first_key, int time, int head_dim,
                                                   float scale) {
  constexpr int kTile = kBackwardTile;
  block_gemm<false, true, 2>(probs, score_ld, q_tile, ld, k_tile, ld, kTile, kTile, head_dim,
                             scale, false);
  block_gemm<false, true, 2>(dprobs, score_ld, do_tile, ld, v_tile, ld, kTile, kTile, head_dim,
                             1.0f, false);
  __syncthreads();
  for (int e = threadIdx.x; e < kTile * kTile; e += blockDim.x) {
    const int r = e / kTile, j = e % kTile;
    const int query = first_query + r, key = first_key + j;
    const bool visible = query < time && key <= query && key >= start_tile[r];
    const float p = visible ? expf(probs[r * score_ld + j] - lse_tile[r]) : 0.0f;
    probs[r * score_ld + j] = p;
    dprobs[r * score_ld + j] = p * (dprobs[r * score_ld + j] - delta_tile[r]);
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
template <class Format>
__global__ void __launch_bounds__(kBackwardThreads)
attention_backward_dkdv_kernel(Storage<Format>* dk, Storage<Format>* dv,
                               const Storage<Format>* dout, const Storage<Format>* q,
                               const Storage<Format>* k, const Storage<Format>* v,
                               const float* lse, const float* delta, const int32_t* positions,
                               AttentionDims dims, float scale) {
  constexpr int kTile = kBackwardTile;
  constexpr int kScoreLd = kTile + 1;
  ZT_DYNAMIC_SHARED(float, shared);
  const int head_dim = dims.head_dim, ld = head_dim + 1;
  float* k_tile = shared;                        // [kTile, ld]
  float* v_tile = k_tile + kTile * ld;           // [kTile, ld]
  float* dk_acc = v_tile + kTile * ld;           // [kTile, ld]
  float* dv_acc = dk_acc + kTile * ld;           // [kTile, ld]
  float* q_tile = dv_acc + kTile * ld;           // [kTile, ld]
  float* do_tile = q_tile + kTile * ld;          // [kTile, ld]
  float* probs = do_tile + kTile * ld;           // [kTile, kScoreLd]: [queries, keys]
  float* dprobs = probs + kTile * kScoreLd;      // [kTile, kScoreLd]
  float* lse_tile = dprobs + kTile * kScoreLd;   // [kTile]
  float* delta_tile = lse_tile + kTile;          // [kTile]
  int* start_tile = reinterpret_cast<int*>(delta_tile + kTile);  // [kTile]

  const int first_key = static_cast<int>(blockIdx.x) * kTile;  // early keys (most work) first
  const int kv_head = blockIdx.y, b = blockIdx.z;
  const int keys = min(kTile, dims.time - first_key);
  load_tile<Format>(k_tile, ld, k + dims.kv_offset(b, kv_head) + first_key * dims.kv_stride(),
                    dims.kv_stride(), keys, kTile, head_dim);
  load_tile<Format>(v_tile, ld, v + dims.kv_offset(b, kv_head) + first_key * dims.kv_stride(),
                    dims.kv_stride(), keys, kTile, head_dim);
  zero(dk_acc, kTile * ld);
  zero(dv_acc, kTile * ld);
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
      load_tile<Format>(q_tile, ld, q + row_offset, dims.q_stride(), queries, kTile, head_dim);
      load_tile<Format>(do_tile, ld, dout + row_offset, dims.q_stride(), queries, kTile, head_dim);
      load_row_stats(lse_tile, delta_tile, start_tile, lse, delta, positions, dims, b,
                     dims.lse_offset(b, head), first_query);
      __syncthreads();
      probabilities_and_gradients(probs, dprobs, kScoreLd, q_tile, do_tile, k_tile, v_tile, ld,
                                  lse_tile, delta_tile, start_tile, first_query, first_key,
                                  dims.time, head_dim, scale);
      // dV += P^T dO, dK += scale dS^T Q
      block_gemm<true, false, 4>(dv_acc, ld, probs, kScoreLd, do_tile, ld, kTile, head_dim, kTile,
                                 1.0f, true);
      block_gemm<true, false, 4>(dk_acc, ld, dprobs, kScoreLd, q_tile, ld, kTile, head_dim, kTile,
                                 scale, true);
    }
  }
  __syncthreads();
  const int64_t key_offset = dims.kv_offset(b, kv_head) + first_key * dims.kv_stride();
  store_tile<Format>(dk + key_offset, dims.kv_stride(), dk_acc, ld, keys, head_dim);
  store_tile<Format>(dv + key_offset, dims.kv_stride(), dv_acc, ld, keys, head_dim);
}

// dQ of the queries [first_query, first_query + kTile) of one head: sums over the key tiles
// these queries see.
template <class Format>
__global__ void __launch_bounds__(kBackwardThreads)
attention_backward_dq_kernel(Storage<Format>* dq, const Storage<Format>* dout,
                             const Storage<Format>* q, const Storage<Format>* k,
                             const Storage<Format>* v, const float* lse, const float* delta,
                             const int32_t* positions, AttentionDims dims, float scale) {
  constexpr int kTile = kBackwardTile;
  constexpr int kScoreLd = kTile + 1;
  ZT_DYNAMIC_SHARED(float, shared);
  const int head_dim = dims.head_dim, ld = head_dim + 1;
  float* q_tile = shared;                        // [kTile, ld]
  float* do_tile = q_tile + kTile * ld;          // [kTile, ld]
  float* dq_acc = do_tile + kTile * ld;          // [kTile, ld]
  float* k_tile = dq_acc + kTile * ld;           // [kTile, ld]
  float* v_tile = k_tile + kTile * ld;           // [kTile, ld]
  float* probs = v_tile + kTile * ld;            // [kTile, kScoreLd]
  float* dprobs = probs + kTile * kScoreLd;      // [kTile, kScoreLd]
  float* lse_tile = dprobs + kTile * kScoreLd;   // [kTile]
  float* delta_tile = lse_tile + kTile;          // [kTile]
  int* start_tile = reinterpret_cast<int*>(delta_tile + kTile);  // [kTile]

  const int tiles = (dims.time + kTile - 1) / kTile;
  const int first_query = (tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;  // longest first
  const int head = blockIdx.y, b = blockIdx.z;
  const int kv_head = head / dims.group();
  const int queries = min(kTile, dims.time - first_query);
  const int64_t row_offset = dims.q_offset(b, head) + first_query * dims.q_stride();
  load_tile<Format>(q_tile, ld, q + row_offset, dims.q_stride(), queries, kTile, head_dim);
  load_tile<Format>(do_tile, ld, dout + row_offset, dims.q_stride(), queries, kTile, head_dim);
  load_row_stats(lse_tile, delta_tile, start_tile, lse, delta, positions, dims, b,
                 dims.lse_offset(b, head), first_query);
  zero(dq_acc, kTile * ld);
  const Storage<Format>* k_rows = k + dims.kv_offset(b, kv_head);
  const Storage<Format>* v_rows = v + dims.kv_offset(b, kv_head);
  // Keys from the tile holding the start of the first query's sample (aligned tiles).
  const int keys_begin = sample_start(positions, dims, b, first_query) / kTile * kTile;
  for (int first_key = keys_begin; first_key < first_query + queries; first_key += kTile) {
    const int keys = min(kTile, dims.time - first_key);
    __syncthreads();  // the previous step's product is done with k_tile, dprobs
    load_tile<Format>(k_tile, ld, k_rows + first_key * dims.kv_stride(), dims.kv_stride(), keys,
                      kTile, head_dim);
    load_tile<Format>(v_tile, ld, v_rows + first_key * dims.kv_stride(), dims.kv_stride(), keys,
                      kTile, head_dim);
    __syncthreads();
    probabilities_and_gradients(probs, dprobs, kScoreLd, q_tile, do_tile, k_tile, v_tile, ld,
                                lse_tile, delta_tile, start_tile, first_query, first_key,
                                dims.time, head_dim, scale);
    // dQ += scale dS K
    block_gemm<false, false, 4>(dq_acc, ld, dprobs, kScoreLd, k_tile, ld, kTile, head_dim, kTile,
                                scale, true);
  }
  __syncthreads();
  store_tile<Format>(dq + row_offset, dims.q_stride(), dq_acc, ld, queries, head_dim);
}

// ---- host side -----------------------------------------------------------------------------

size_t dkdv_shared_bytes(int head_dim) {
  const size_t ld = static_cast<size_t>(head_dim) + 1;
  // ... + lse, delta [kTile] (fp32) and the sample starts [kTile] (int32).
  return (6 * kBackwardTile * ld + 2 * kBackwardTile * (kBackwardTile + 1) + 3 * kBackwardTile) *
         sizeof(float);
}

size_t dq_shared_bytes(int head_dim) {
  const size_t ld = static_cast<size_t>(head_dim) + 1;
  return (5 * kBackwardTile * ld + 2 * kBackwardTile * (kBackwardTile + 1) + 3 * kBackwardTile) *
         sizeof(float);
}

}  // namespace

void CudaBackendImpl::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                         Tensor k, Tensor v, Tensor out, Tensor lse,
                                         Tensor positions, float scale_factor) {
  const char* op = "attention_backward";
  const AttentionDims dims = check_attention(op, q, k, v, out, "out", lse);
  const int32_t* position_of = positions_data(op, positions, dims.batch, dims.time);
  const char* names[] = {"dout", "dq", "dk", "dv"};
  const Tensor* grads[] = {&dout, &dq, &dk, &dv};
  const Tensor* likes[] = {&q, &q, &k, &v};
  for (int i = 0; i < 4; ++i) {
    expect_device(op, names[i], *grads[i]);
    expect_same_shape(op, names[i], *grads[i], i < 2 ? "q" : (i == 2 ? "k" : "v"), *likes[i]);
    expect_same_dtype(op, names[i], *grads[i], "q", q);
  }
  if (dims.batch == 0 || dims.time == 0 || dims.heads == 0) return;
  Buffer delta(*this, static_cast<size_t>(lse.numel()) * sizeof(float));  // delta[B,H,T]
  const size_t dkdv_bytes = dkdv_shared_bytes(dims.head_dim);
  const size_t dq_bytes = dq_shared_bytes(dims.head_dim);
  dispatch_float(q.dtype, op, "q", [&](auto format) {
    using Format = decltype(format);
    const int64_t rows = int64_t{dims.batch} * dims.time * dims.heads;
    launch({grid_for(rows * 32), kThreads, 0, stream_}, attention_delta_kernel<Format>,
        static_cast<float*>(delta.data()), data_of<Format>(dout), data_of<Format>(out), dims);
    ZT_CUDA_CHECK_LAUNCH("attention_delta_kernel");

    auto dkdv_kernel = attention_backward_dkdv_kernel<Format>;
    allow_shared_memory(*this, op, dkdv_kernel, dkdv_bytes, dims.head_dim);
    const dim3 dkdv_grid(tiles_of(dims.time, kBackwardTile),
                         static_cast<unsigned int>(dims.kv_heads),
                         static_cast<unsigned int>(dims.batch));
    launch({dkdv_grid, kBackwardThreads, dkdv_bytes, stream_}, dkdv_kernel,
        data_of<Format>(dk), data_of<Format>(dv), data_of<Format>(dout), data_of<Format>(q),
        data_of<Format>(k), data_of<Format>(v), lse.f32(), static_cast<const float*>(delta.data()),
        position_of, dims, scale_factor);
    ZT_CUDA_CHECK_LAUNCH("attention_backward_dkdv_kernel");

    auto dq_kernel = attention_backward_dq_kernel<Format>;
    allow_shared_memory(*this, op, dq_kernel, dq_bytes, dims.head_dim);
    const dim3 dq_grid(tiles_of(dims.time, kBackwardTile), static_cast<unsigned int>(dims.heads),
                       static_cast<unsigned int>(dims.batch));
    launch({dq_grid, kBackwardThreads, dq_bytes, stream_}, dq_kernel,
        data_of<Format>(dq), data_of<Format>(dout), data_of<Format>(q), data_of<Format>(k),
        data_of<Format>(v), lse.f32(), static_cast<const float*>(delta.data()), position_of, dims,
        scale_factor);
    ZT_CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
  });
}


}  // namespace zt::cuda
