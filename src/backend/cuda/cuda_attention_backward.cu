// The CUDA backend's causal grouped-query attention, backward, in the FlashAttention-2 manner:
// the probabilities are recomputed tile by tile from the saved log-sum-exp. Deterministic
// without atomics: one kernel computes dK/dV with one block per (32-key tile, kv head, batch),
// looping over the query heads of its group and the query tiles in a fixed order; another
// computes dQ with one block per (32-query tile, head, batch) looping over key tiles. Each block
// owns the rows it writes. bf16/fp16 with D a multiple of 16 multiply on tensor cores
// (TensorCoreMath), everything else on CUDA cores (CudaCoreMath), as the forward.
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
  Operand* p_operand;  // [kTile, probs_ld]: P as an operand (tensor cores) or probs itself
  Operand* ds_operand; // [kTile, probs_ld]
  Operand* ds_low;     // [kTile, probs_ld]: dS - ds_operand, rounded (tensor cores; see dQ below)
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
    if constexpr (Math::kSeparateProbabilityOperands) {
      probs_ld = Math::operand_ld(kTile);
      p_operand = layout.take<Operand>(size_t{kTile} * probs_ld);
      ds_operand = layout.take<Operand>(size_t{kTile} * probs_ld);
      ds_low = layout.take<Operand>(size_t{kTile} * probs_ld);
    } else {
      probs_ld = score_ld;
      p_operand = reinterpret_cast<Operand*>(probs);
      ds_operand = reinterpret_cast<Operand*>(dprobs);
      ds_low = nullptr;
    }
    lse_tile = layout.take<float>(kTile);
    delta_tile = layout.take<float>(kTile);
    start_tile = layout.take<int>(kTile);
  }
};

// The shared middle of both backward kernels, for one (query tile, key tile) pair:
// probs = P = exp(scale Q K^T - lse) on visible keys (0 elsewhere), dprobs = dS = P (dO V^T - delta),
// and both as operands.
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
  if constexpr (Math::kSeparateProbabilityOperands) {
    __syncthreads();
    to_operand<Format>(t.p_operand, t.probs_ld, t.probs, score_ld, kTile, kTile);
    to_operand<Format>(t.ds_operand, t.probs_ld, t.dprobs, score_ld, kTile, kTile);
    // What rounding dS lost, itself rounded: dS = high + low to about 16 bits.
    low_part<Format>(t.ds_low, t.ds_operand, t.probs_ld, t.dprobs, score_ld, kTile, kTile);
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

  const int first_key = static_cast<int>(blockIdx.x) * kTile;  // early keys (most work) first
  const int kv_head = blockIdx.y, b = blockIdx.z;
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
  const int first_query = (tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;  // longest first
  const int head = blockIdx.y, b = blockIdx.z;
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
    // dQ += scale dS K. A row of dS sums to zero (softmax's gradient), so dQ is a sum of terms
    // that cancel; dS rounded to 16 bits alone leaves a residue of the keys' mean in it. On
    // tensor cores dS goes in as high + low parts (two products), as precise as fp32 here.
    Math::template gemm<false, false, 4>(dq_acc, acc_ld, t.ds_operand, t.probs_ld, t.k_tile, ld,
                                         kTile, head_dim, kTile, scale, true);
    if constexpr (Math::kSeparateProbabilityOperands) {
      Math::template gemm<false, false, 4>(dq_acc, acc_ld, t.ds_low, t.probs_ld, t.k_tile, ld,
                                           kTile, head_dim, kTile, scale, true);
    }
  }
  __syncthreads();
  store_tile<Format>(dq + row_offset, dims.q_stride(), dq_acc, acc_ld, queries, head_dim);
}

// ---- host side -----------------------------------------------------------------------------

template <class Format, class Math>
void launch_backward(const CudaBackendImpl& backend, cudaStream_t stream, const char* op,
                     Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& lse, const float* delta,
                     const int32_t* positions, const AttentionDims& dims, float scale_factor) {
  const size_t dkdv_bytes = BackwardShared<Math>(nullptr, dims.head_dim, 2).layout.launch_bytes();
  const size_t dq_bytes = BackwardShared<Math>(nullptr, dims.head_dim, 1).layout.launch_bytes();
  auto dkdv_kernel = attention_backward_dkdv_kernel<Format, Math>;
  allow_shared_memory(backend, op, dkdv_kernel, dkdv_bytes, dims.head_dim);
  const dim3 dkdv_grid(tiles_of(dims.time, kBackwardTile), static_cast<unsigned int>(dims.kv_heads),
                       static_cast<unsigned int>(dims.batch));
  launch({dkdv_grid, kBackwardThreads, dkdv_bytes, stream}, dkdv_kernel, data_of<Format>(dk),
         data_of<Format>(dv), data_of<Format>(dout), data_of<Format>(q), data_of<Format>(k),
         data_of<Format>(v), lse.f32(), delta, positions, dims, scale_factor);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_dkdv_kernel");

  auto dq_kernel = attention_backward_dq_kernel<Format, Math>;
  allow_shared_memory(backend, op, dq_kernel, dq_bytes, dims.head_dim);
  const dim3 dq_grid(tiles_of(dims.time, kBackwardTile), static_cast<unsigned int>(dims.heads),
                     static_cast<unsigned int>(dims.batch));
  launch({dq_grid, kBackwardThreads, dq_bytes, stream}, dq_kernel, data_of<Format>(dq),
         data_of<Format>(dout), data_of<Format>(q), data_of<Format>(k), data_of<Format>(v),
         lse.f32(), delta, positions, dims, scale_factor);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
}

}  // namespace

void run_attention_backward_kernels(CudaBackendImpl& backend, bool tensor_cores, Tensor dq,
                                    Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                                    Tensor out, Tensor lse, const int32_t* positions,
                                    const AttentionDims& dims, float scale) {
  const char* op = "attention_backward";
  cudaStream_t stream = backend.stream();
  Buffer delta(backend, static_cast<size_t>(lse.numel()) * sizeof(float));  // delta[B,H,T]
  dispatch_float(q.dtype, op, "q", [&](auto format) {
    using Format = decltype(format);
    const int64_t rows = int64_t{dims.batch} * dims.time * dims.heads;
    launch({grid_for(rows * 32), kThreads, 0, stream}, attention_delta_kernel<Format>,
        static_cast<float*>(delta.data()), data_of<Format>(dout), data_of<Format>(out), dims);
    ZT_CUDA_CHECK_LAUNCH("attention_delta_kernel");
    const float* delta_values = static_cast<const float*>(delta.data());
    if constexpr (!std::is_same_v<Format, Fp32Format>) {
      if (tensor_cores) {
        launch_backward<Format, TensorCoreMath<Format>>(backend, stream, op, dq, dk, dv, dout, q,
                                                        k, v, lse, delta_values, positions, dims,
                                                        scale);
        return;
      }
    }
    launch_backward<Format, CudaCoreMath<Format>>(backend, stream, op, dq, dk, dv, dout, q, k, v,
                                                  lse, delta_values, positions, dims, scale);
  });
}

}  // namespace zt::cuda
