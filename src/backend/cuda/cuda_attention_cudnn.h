// cuDNN's fused scaled-dot-product attention (the FlashAttention algorithm, run by cuDNN's
// Hopper/Ampere engines) through cudnn-frontend's graph API: the CUDA backend's default
// attention for bf16/fp16 (cuda_attention_variant.h picks it). One graph per shape, built once
// and cached; the workspace comes from the backend's caching allocator.
//
// Layouts (no copies): q[B,T,H,D] is cuDNN's [B,H,T,D] with strides [T*H*D, D, H*D, 1]; k, v
// likewise with Hkv heads (grouped-query attention without expanding K/V); lse[B,H,T] is cuDNN's
// Stats [B,H,T,1] (fp32, natural log: max + log(sum exp)), the same numbers the tensor-core
// kernels save, so either backward can follow either forward.
//
// Packed rows (positions not empty): each sample becomes one sequence of cuDNN's ragged
// (THD) layout: ragged offsets into the rows, per-sample sequence lengths with the padding mask,
// causal within the sample. The sample boundaries are read from the host copy of the positions
// that CudaBackendImpl::copy() kept (UploadMirror), so nothing waits on the GPU; the number of
// sequences and the longest are rounded up to buckets so that a few graphs serve every batch
// (cudnn_ragged_batch / cudnn_ragged_time, backend/attention_scratch_rules.h: the memory model
// counts the workspace with the same functions).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"

namespace zt::cuda {

class CudaBackendImpl;

// The geometry of one attention call (after check_attention).
struct AttentionCall {
  DType dtype = DType::BF16;
  int batch = 0, time = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  // Packed rows: the start of every sample, as token indices b*T + t, ascending (host memory,
  // from the positions' host copy); empty for one right-padded sample per row.
  std::span<const int64_t> sample_starts;
};

class CudnnAttention {
 public:
  explicit CudnnAttention(CudaBackendImpl& backend);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds (or finds) the forward and backward graphs of this call's shape; returns "" when
  // cuDNN runs them, else cuDNN's reason (the caller falls back and says so once).
  std::string prepare(const AttentionCall& call);
  // out[B,T,H,D], lse[B,H,T] from q, k, v (prepare() said "" for this call).
  void forward(const AttentionCall& call, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v);
  // dq, dk, dv written from dout, q, k, v, out, lse.
  void backward(const AttentionCall& call, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                Tensor k, Tensor v, Tensor out, Tensor lse);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::cuda

namespace zt::cuda {
// lse[B,H,T] <-> the THD stats [B*T, H] of cuDNN's packed (ragged) graphs (cuda_attention.cu):
// heads_major: dst[b,h,t] = src[(b*T+t)*H + h]; else the inverse. Queued on `stream`.
void transpose_token_heads(cudaStream_t stream, float* dst, const float* src, int batch, int time,
                           int heads, bool to_heads_major);
}  // namespace zt::cuda
