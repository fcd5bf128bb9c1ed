// The CUDA backend's attention over a key/value cache (backend.h attention_cached_forward): the
// T newest queries of a row against its S cached keys, causal with the offset S - T, as a
// generation step needs (T = 1 after the prompt). One block per (row, query, head): the scaled
// query in shared memory; a pass over the visible keys for the row maximum; a pass over tiles of
// keys whose softmax weights go to shared memory, from which each thread adds the weighted
// values of its own head-dim columns. Two reads of the keys and one of the values, in fp32;
// simple on purpose (a step reads the whole cache once, memory-bound like any decode kernel).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

template <class Format>
using Storage = typename Format::Storage;

constexpr int kCachedThreads = 128;    // threads per block: 4 warps
constexpr int kColumnsPerThread = 4;   // head-dim columns a thread accumulates: D <= 512

// scaled_q[D] . key[D] in fp32.
template <class Format>
__device__ inline float key_dot(const float* scaled_q, const Storage<Format>* key, int head_dim) {
  float dot = 0.0f;
  for (int d = 0; d < head_dim; ++d) dot += scaled_q[d] * Format::to_float(key[d]);
  return dot;
}

// out[B,T,H,D] from q[B,T,H,D], k,v[B,S,Hkv,D]; shared memory: float [D + blockDim.x].
template <class Format>
__global__ void attention_cached_kernel(Storage<Format>* out, const Storage<Format>* q, const Storage<Format>* k,
                                        const Storage<Format>* v, int batch, int queries, int keys, int heads,
                                        int kv_heads, int head_dim, float scale) {
  ZT_DYNAMIC_SHARED(float, shared);
  float* scaled_q = shared;          // [D]
  float* weights = shared + head_dim;  // [blockDim.x]: one tile of keys' unnormalised softmax weights
  ZT_SHARED(float, scratch, [32]);
  const int64_t items = int64_t{batch} * queries * heads;
  const int64_t kv_stride = int64_t{kv_heads} * head_dim;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t head = item % heads, row = item / heads;  // row = b * T + t
    const int64_t b = row / queries, t = row % queries;
    const int visible = static_cast<int>(keys - queries + t + 1);  // keys [0, S - T + t]
    const int64_t kv_first = b * keys * kv_stride + (head / (heads / kv_heads)) * int64_t{head_dim};
    const Storage<Format>* q_row = q + (row * heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) scaled_q[d] = Format::to_float(q_row[d]) * scale;
    __syncthreads();
    float local_max = -INFINITY;
    for (int j = threadIdx.x; j < visible; j += blockDim.x)
      local_max = fmaxf(local_max, key_dot<Format>(scaled_q, k + kv_first + j * kv_stride, head_dim));
    const float row_max = block_max(local_max, scratch);
    float local_sum = 0.0f;
    float acc[kColumnsPerThread] = {};  // acc[c]: column threadIdx.x + c * blockDim.x
    for (int tile = 0; tile < visible; tile += blockDim.x) {
      const int j = tile + threadIdx.x;
      const float weight = j < visible ? expf(key_dot<Format>(scaled_q, k + kv_first + j * kv_stride, head_dim) - row_max) : 0.0f;
      local_sum += weight;
      weights[threadIdx.x] = weight;
      __syncthreads();
      const int count = min(static_cast<int>(blockDim.x), visible - tile);
      for (int c = 0; c < kColumnsPerThread; ++c) {
        const int d = threadIdx.x + c * blockDim.x;
        if (d >= head_dim) break;
        for (int i = 0; i < count; ++i) acc[c] += weights[i] * Format::to_float(v[kv_first + (tile + i) * kv_stride + d]);
      }
      __syncthreads();  // the tile's weights are read before the next tile writes them
    }
    const float sum = block_sum(local_sum, scratch);
    Storage<Format>* out_row = out + (row * heads + head) * head_dim;
    for (int c = 0; c < kColumnsPerThread; ++c) {
      const int d = threadIdx.x + c * blockDim.x;
      if (d < head_dim) out_row[d] = Format::from_float(acc[c] / sum);
    }
    __syncthreads();  // scaled_q is read by every thread before the next item rewrites it
  }
}

}  // namespace

void CudaBackendImpl::attention_cached_forward(Tensor out, Tensor q, Tensor k, Tensor v, float scale) {
  const char* op = "attention_cached_forward";
  expect_device_float(op, "q", q);
  expect_device(op, "k", k);
  expect_device(op, "v", v);
  expect_device(op, "out", out);
  expect_same_dtype(op, "k", k, "q", q);
  expect_same_dtype(op, "v", v, "q", q);
  expect_same_dtype(op, "out", out, "q", q);
  const CachedAttentionDims dims = cached_attention_dims(op, out, q, k, v);
  ZT_CHECK(dims.head_dim <= int64_t{kColumnsPerThread} * kCachedThreads, op, ": head dim D = ", dims.head_dim,
           " is above the kernel's ", kColumnsPerThread * kCachedThreads);
  ZT_CHECK(dims.keys < (int64_t{1} << 30) && dims.batch * dims.queries * dims.heads < (int64_t{1} << 31), op, ": k ",
           k.describe(), " exceeds the kernel's index range");
  const int64_t items = dims.batch * dims.queries * dims.heads;
  if (items == 0) return;
  const size_t shared_bytes = static_cast<size_t>(dims.head_dim + kCachedThreads) * sizeof(float);
  dispatch_float(q.dtype, op, "q", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(items), kCachedThreads, shared_bytes, stream_}, attention_cached_kernel<Format>, data_of<Format>(out),
           data_of<Format>(q), data_of<Format>(k), data_of<Format>(v), static_cast<int>(dims.batch),
           static_cast<int>(dims.queries), static_cast<int>(dims.keys), static_cast<int>(dims.heads),
           static_cast<int>(dims.kv_heads), static_cast<int>(dims.head_dim), scale);
    ZT_CUDA_CHECK_LAUNCH("attention_cached_kernel");
  });
}

}  // namespace zt::cuda
