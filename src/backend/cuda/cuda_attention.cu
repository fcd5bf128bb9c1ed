// The CUDA backend's attention entry points: the argument checks, then one of three variants,
// chosen here and nowhere else (ZT_CUDA_ATTENTION):
//   cudnn         cuDNN's fused SDPA (cuda_attention_cudnn.cpp); the default for bf16/fp16
//   tensor-cores  our FlashAttention-2-style kernels on tensor cores (bf16/fp16, D % 16 == 0)
//   cuda-cores    the same kernels on CUDA cores in fp32 (every dtype and head dim)
// `auto` (or unset) takes cuDNN wherever it runs the case, else our tensor-core kernels where
// they fit, else the CUDA-core ones, and says once per case why cuDNN was not used; `cudnn`
// insists (an error where cuDNN cannot run the case), so a benchmark or test knows what ran.
// Also here: the lse <-> THD stats transpose of cuDNN's packed graphs.
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention.cuh"
#include "backend/cuda/cuda_attention_cudnn.h"
#include "backend/attention_scratch_rules.h"

namespace zt::cuda {

namespace {

using namespace attention;

// ZT_CUDA_ATTENTION's variants, read at every call (backend/attention_scratch_rules.h: the
// memory model reads the same choice to count the variant's scratch).
using AttentionVariant = CudaAttentionVariant;

// Prints once per process and case why cuDNN did not take it.
void note_fallback(const AttentionCall& call, const std::string& reason, bool tensor_cores) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::string key = cat(dtype_name(call.dtype), " B=", call.batch, " T=", call.time, " H=",
                              call.heads, " Hkv=", call.kv_heads, " D=", call.head_dim,
                              call.sample_starts.empty() ? "" : " packed");
  std::lock_guard<std::mutex> lock(mutex);
  if (!said.insert(key).second) return;
  std::fprintf(stderr, "zerotune: attention %s: cuDNN cannot run it (%s); using our %s kernels\n",
               key.c_str(), reason.c_str(), tensor_cores ? "tensor-core" : "CUDA-core");
}

// The start (b*T + t) of every sample of packed rows, read from the host copy of the
// positions (UploadMirror); positions that did not come from the host are downloaded (waits).
std::vector<int64_t> sample_starts(CudaBackendImpl& backend, const Tensor& positions,
                                   const AttentionDims& dims) {
  const int64_t tokens = int64_t{dims.batch} * dims.time;
  std::vector<int32_t> downloaded;
  const std::vector<int32_t>* values = backend.uploads().find(positions.data, tokens);
  if (values == nullptr) {
    downloaded.resize(static_cast<size_t>(tokens));
    backend.download(downloaded.data(), positions.data, downloaded.size() * sizeof(int32_t));
    values = &downloaded;
  }
  std::vector<int64_t> starts;
  for (int64_t token = 0; token < tokens; ++token) {
    // A sample starts where the position is 0 (and every row starts one: backend.h's rule).
    if ((*values)[static_cast<size_t>(token)] == 0 || token % dims.time == 0) starts.push_back(token);
  }
  return starts;
}

// The variant for this call: true when cuDNN runs it (call prepared), else `tensor_cores` says
// which of our kernels.
bool use_cudnn(CudaBackendImpl& backend, const AttentionCall& call, bool& tensor_cores) {
  const AttentionVariant variant = requested_cuda_attention_variant();
  tensor_cores = variant != AttentionVariant::CudaCores && tensor_cores_fit(call.dtype, call.head_dim);
  if (variant == AttentionVariant::TensorCores || variant == AttentionVariant::CudaCores) return false;
  const std::string reason = backend.cudnn_attention().prepare(call);
  if (reason.empty()) return true;
  ZT_CHECK(variant != AttentionVariant::Cudnn, "ZT_CUDA_ATTENTION=cudnn, but cuDNN cannot run attention with ",
           dtype_name(call.dtype), " q[", call.batch, ",", call.time, ",", call.heads, ",", call.head_dim,
           "], ", call.kv_heads, " kv heads", call.sample_starts.empty() ? "" : ", packed rows", ": ", reason);
  note_fallback(call, reason, tensor_cores);
  return false;
}

// What both entry points decide: the call (packed rows' sample starts from the host mirror),
// then cuDNN (run_cudnn(call)) or our kernels (run_kernels(tensor_cores)).
template <class RunCudnn, class RunKernels>
void dispatch(CudaBackendImpl& backend, const Tensor& q, const Tensor& positions, const int32_t* position_of,
              const AttentionDims& dims, float scale, RunCudnn run_cudnn, RunKernels run_kernels) {
  // position_of: positions_data()'s pointer, null for an empty tensor (one sample per row).
  const std::vector<int64_t> starts =
      position_of ? sample_starts(backend, positions, dims) : std::vector<int64_t>{};
  const AttentionCall call{q.dtype, dims.batch, dims.time, dims.heads, dims.kv_heads, dims.head_dim, scale, starts};
  bool tensor_cores = false;
  if (use_cudnn(backend, call, tensor_cores)) {
    run_cudnn(call);
  } else {
    run_kernels(tensor_cores);
  }
}

// dst[b,h,t] = src[(b*T+t)*H + h] (heads_major) or the inverse; one thread per element.
__global__ void transpose_token_heads_kernel(float* dst, const float* src, int batch, int time,
                                             int heads, bool to_heads_major) {
  const int64_t count = int64_t{batch} * time * heads;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    // i indexes [B,H,T]: (b, h, t)
    const int64_t t = i % time, h = i / time % heads, b = i / (int64_t{time} * heads);
    const int64_t token_major = (b * time + t) * heads + h;
    if (to_heads_major) dst[i] = src[token_major];
    else dst[token_major] = src[i];
  }
}

}  // namespace

void transpose_token_heads(cudaStream_t stream, float* dst, const float* src, int batch, int time,
                           int heads, bool to_heads_major) {
  const int64_t count = int64_t{batch} * time * heads;
  if (count == 0) return;
  launch({grid_for(count), kThreads, 0, stream}, transpose_token_heads_kernel, dst, src, batch,
         time, heads, to_heads_major);
  ZT_CUDA_CHECK_LAUNCH("transpose_token_heads_kernel");
}

void CudaBackendImpl::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                        Tensor positions, float scale) {
  const char* op = "attention_forward";
  const AttentionDims dims = check_attention(op, q, k, v, out, "out", lse);
  const int32_t* position_of = positions_data(op, positions, dims.batch, dims.time);
  if (dims.batch == 0 || dims.time == 0 || dims.heads == 0) return;
  dispatch(
      *this, q, positions, position_of, dims, scale,
      [&](const AttentionCall& call) { cudnn_attention().forward(call, out, lse, q, k, v); },
      [&](bool tensor_cores) {
        run_attention_forward_kernels(*this, tensor_cores, out, lse, q, k, v, position_of, dims, scale);
      });
}

void CudaBackendImpl::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                         Tensor k, Tensor v, Tensor out, Tensor lse,
                                         Tensor positions, float scale) {
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
  dispatch(
      *this, q, positions, position_of, dims, scale,
      [&](const AttentionCall& call) { cudnn_attention().backward(call, dq, dk, dv, dout, q, k, v, out, lse); },
      [&](bool tensor_cores) {
        run_attention_backward_kernels(*this, tensor_cores, dq, dk, dv, dout, q, k, v, out, lse, position_of,
                                       dims, scale);
      });
}

}  // namespace zt::cuda
