// The CUDA backend's causal self-attention with grouped-query heads, forward, in the
// FlashAttention-2 manner: one block per (64-query tile, head, batch) holds its queries in shared
// memory and walks the key tiles they can see with an online softmax (running max and sum per
// query row), so no T x T matrix ever exists; it writes out and the log-sum-exp that backward
// uses to recompute the probabilities. bf16/fp16 with D a multiple of 16 multiply on tensor
// cores (TensorCoreMath: 16-bit tiles, fp32 accumulation); fp32 and other head dims on CUDA
// cores (CudaCoreMath).
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
  Operand* probs;     // [kTile, probs_ld]: the probabilities as an operand (tensor cores) or scores
  Operand* probs_low; // [kTile, probs_ld]: what rounding them lost, rounded (tensor cores)
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
    if constexpr (Math::kSeparateProbabilityOperands) {
      probs_ld = Math::operand_ld(kTile);
      probs = layout.take<Operand>(size_t{kTile} * probs_ld);
      probs_low = layout.take<Operand>(size_t{kTile} * probs_ld);
    } else {
      probs_ld = score_ld;
      probs = reinterpret_cast<Operand*>(scores);
      probs_low = nullptr;
    }
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
    if constexpr (Math::kSeparateProbabilityOperands) {
      __syncthreads();
      to_operand<Format>(tiles.probs, tiles.probs_ld, scores, score_ld, kTile, kTile);
      low_part<Format>(tiles.probs_low, tiles.probs, tiles.probs_ld, scores, score_ld, kTile, kTile);
    }
    __syncthreads();
    // o_acc = rescale * o_acc + P V. On tensor cores P goes in as high + low 16-bit parts (two
    // products): the weights V gets must be the ones backward recomputes from lse, else
    // delta = rowsum(dO * out) misses V's common component (OPT's v_proj bias) by the rounding's
    // mean, and dS = P (dP - delta), whose rows cancel that component, keeps it.
    Math::template gemm<false, false, 4>(o_acc, acc_ld, tiles.probs, tiles.probs_ld,
                                         tiles.v_tile, ld, kTile, head_dim, kTile, 1.0f, true,
                                         row_rescale);
    if constexpr (Math::kSeparateProbabilityOperands) {
      Math::template gemm<false, false, 4>(o_acc, acc_ld, tiles.probs_low, tiles.probs_ld,
                                           tiles.v_tile, ld, kTile, head_dim, kTile, 1.0f, true);
    }
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
      if (tensor_cores) {
        launch_forward<Format, TensorCoreMath<Format>>(backend, backend.stream(), op, out, lse, q,
                                                       k, v, positions, dims, scale);
        return;
      }
    }
    launch_forward<Format, CudaCoreMath<Format>>(backend, backend.stream(), op, out, lse, q, k, v,
                                                 positions, dims, scale);
  });
}

}  // namespace zt::cuda
