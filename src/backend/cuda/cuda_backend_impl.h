// CudaBackendImpl: the zt::Backend on one NVIDIA GPU (cuBLASLt GEMMs + our kernels), its
// stream, cuBLASLt handle, caching allocator, and the argument checks its ops share. The ops
// are split by topic over cuda_*.cu files (memory, elementwise, reductions, gemm, norms,
// attention, loss), as the CPU backend's are; the optimizer kernels are a class of their own
// (cuda_optimizer_kernels.h).
//
// Dtypes: every op takes the storage dtypes the rules at the top of backend/backend.h allow
// (the contract of both backends, written there once); anything else is a zt::Error naming the
// op and the argument. What is particular to this backend:
// - Every tensor an op touches must be device memory (Device::CUDA) of this backend's GPU,
//   except copy() and copy_async(), which also read and write host memory (pageable, or pinned
//   memory of make_host_backend()). copy() returns once the host side may be read (download) or
//   reused (upload): a download waits for the stream; an upload of at most
//   HostStaging::kMaxUploadBytes is copied into pinned staging and queued, without waiting
//   (cuda_host_staging.h), a larger one waits; copy_async()
//   queues transfers with pinned host memory and device<->device ones on the stream, and falls
//   back to copy() for pageable host memory (whose asynchronous copies CUDA does not promise to
//   order with the host) and host<->host.
// - record_event() gives a cudaEvent recorded on the stream (from a small pool of reusable
//   events). Wait for it while its backend lives; destroying it is allowed at any time.
// - attention: the head dim D is bounded by the tiles' shared memory (D <= 128 on A100/H100).
// - matmul_bias adds the bias in cuBLASLt's epilogue when the bias has the output's dtype and
//   is 16-byte aligned; other biases take matmul + add_bias (same results within rounding).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/cuda_host_staging.h"
#include "backend/cuda/cuda_upload_mirror.h"
#include "backend/arg_checks.h"
#include "backend/buffer.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_optimizer_kernels.h"

namespace zt::cuda {

// Reusable CUDA events for record_event() (defined in cuda_backend.cpp).
class EventPool;
// The discardable buffers (cuda_vmm.h), used only by cuda_backend.cpp: declared here so that the
// kernels' sources do not depend on the virtual-memory bookkeeping.
class DiscardableMemory;
// cuDNN's fused attention (cuda_attention_cudnn.h).
class CudnnAttention;

// Cached cuBLASLt algorithm choices per GEMM shape (defined in cuda_gemm.cpp).
struct GemmPlans;
struct GemmPlansDeleter {
  void operator()(GemmPlans* plans) const;
};
std::unique_ptr<GemmPlans, GemmPlansDeleter> make_gemm_plans();
constexpr size_t kGemmWorkspaceBytes = static_cast<size_t>(kCudaWorkspaceBytes);  // cuBLASLt workspace

// ---- argument checks (every message names the op, the argument and the problem) ------------

// Throws unless `tensor` is device memory with data (or has no elements).
void expect_device(const char* op, const char* arg, const Tensor& tensor);
// Device memory of exactly `dtype`.
void expect_device(const char* op, const char* arg, const Tensor& tensor, DType dtype);
// Device memory of fp32, bf16 or fp16.
void expect_device_float(const char* op, const char* arg, const Tensor& tensor);
// Throws unless `tensor` has the dtype of `other` (one dtype for all activations of an op).
void expect_same_dtype(const char* op, const char* arg, const Tensor& tensor,
                       const char* other_arg, const Tensor& other);
// A device tensor with the shape and dtype of `other` (the elementwise ops' companions).
void expect_device_like(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                        const Tensor& other);

// The device pointer of rope's and attention's positions int32[B*T] (backend.h "positions
// within packed rows"; the kernels trust the rule), or nullptr for an empty tensor (positions = t).
const int32_t* positions_data(const char* op, const Tensor& positions, int64_t batch, int64_t time);

// Shape checks shared with the CPU backend (backend/arg_checks.h).
using zt::expect_numel;
using zt::expect_same_shape;
using zt::expect_shape;

// The last dimension is the columns, leading dimensions are flattened into rows.
struct MatrixShape {
  int64_t rows = 0;
  int64_t cols = 0;
};
MatrixShape matrix_shape(const char* op, const char* arg, const Tensor& tensor);

// Indices of the status words in CudaBackendImpl::device_status().
enum StatusSlot : int {
  kFirstBadRow = 0,    // min row index with a bad id/target (UINT64_MAX: none); reset per op
  kDeferredErrors = 1, // bits of DeferredError, checked at every synchronisation
  kBadEmbeddingId = 2, // an id outside the vocabulary that an embedding kernel found (its int32 bits)
  kEmbeddingVocab = 3, // that kernel's vocabulary size
  kStatusSlots = 4,
};
// Errors found by kernels that do not synchronise (reporting them at once would stall the
// GPU): the kernel sets a bit, the next synchronising call throws.
enum DeferredError : uint64_t {
  kDropoutNegativeRowId = 1,
  kCrossEntropyBadMask = 2,    // cross_entropy_accumulate: a mask flag other than 0 or 1
  kCrossEntropyBadTarget = 4,  // cross_entropy_accumulate: a masked row's target outside [0, V)
  kEmbeddingForwardBadId = 8,  // embedding_forward: an id outside [0, V) (kBadEmbeddingId says which)
  kEmbeddingBackwardBadId = 16,  // embedding_backward: the same
};

class CudaBackendImpl;
// The CUDA backend behind `backend` (for the NCCL communicator: its stream); an error naming
// the backend otherwise.
CudaBackendImpl& impl_of(Backend& backend);

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(int device, CudaBackendOptions options);
  ~CudaBackendImpl() override;
  CudaBackendImpl(const CudaBackendImpl&) = delete;
  CudaBackendImpl& operator=(const CudaBackendImpl&) = delete;

  Device device() const override { return Device::CUDA; }
  std::string name() const override;

  // In use: the caching allocator's blocks plus the discardable buffers' mapped chunks.
  size_t memory_in_use() const override;
  size_t memory_peak() const override { return peak_bytes_; }
  void reset_peak() override;
  size_t memory_reserved() const override;
  size_t device_memory_used() const override;
  size_t device_memory_free() const override;
  size_t discardable_bytes() const override;
  size_t discardable_peak() const override;
  size_t discard_granularity() const override;
  int64_t allocation_size(int64_t bytes) const override { return cuda_allocation_size(bytes); }
  size_t device_allocations() const override { return allocator_.device_allocations(); }
  void synchronize() override;
  void profiler_range(bool start) override;
  std::optional<DeviceMemory> memory() const override;
  void reset_memory_peak() override { reset_peak(); }
  MemoryTraits memory_traits() const override;
  std::string pci_bus_id() const override { return cuda_device_pci_bus_id(device_); }
  int device_index() const override { return device_; }
  size_t gemm_plans_cached() const override;
  size_t gemm_heuristic_queries() const override;

  void* allocate(size_t bytes) override;
  void* allocate_discardable(size_t bytes, bool committed) override;
  void release(void* pointer) override;
  void discard(Tensor range) override;
  void commit(Tensor range) override;
  void copy(Tensor dst, Tensor src) override;
  void copy_async(Tensor dst, Tensor src) override;
  std::unique_ptr<BackendEvent> record_event() override;
  std::unique_ptr<BackendEvent> transfer_async(Tensor dst, Tensor src) override;
  void wait_for(const BackendEvent& event) override;
  void fill(Tensor dst, float value) override;
  // In place on fp32 device memory, one pass, no scratch (the default goes through copy()).
  void round_to(Tensor x, DType dtype) override;
  // A CPU backend on page-locked host memory (cudaHostAlloc/cudaFreeHost on this GPU).
  std::unique_ptr<Backend> make_host_backend() override;

  void accumulate(Tensor dst, Tensor src, float scale) override;
  void scale(Tensor dst, float factor) override;
  void clamp(Tensor x, float lo, float hi) override;
  double sum_squares(Tensor x) override;
  bool has_inf_or_nan(Tensor x) override;
  // One kernel per tensor into one scratch buffer, one download for all (cuda_reductions.cu).
  double sum_squares_of(std::span<const Tensor> xs) override;
  bool has_inf_or_nan_in(std::span<const Tensor> xs) override;

  void matmul(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b, float alpha,
              float beta) override;
  void matmul_bias(Tensor c, Tensor a, Tensor b, Tensor bias) override;
  void add_bias(Tensor y, Tensor bias) override;
  void bias_backward(Tensor dbias, Tensor dy) override;

  void embedding_forward(Tensor out, Tensor table, Tensor ids) override;
  void embedding_backward(Tensor dtable, Tensor dout, Tensor ids) override;

  void rmsnorm_forward(Tensor y, Tensor rstd, Tensor x, Tensor weight, float eps) override;
  void rmsnorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dy, Tensor x,
                        Tensor weight, Tensor rstd) override;
  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, Tensor x, Tensor weight, Tensor bias,
                         float eps) override;
  void layernorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dbias, Tensor dy,
                          Tensor x, Tensor weight, Tensor mean, Tensor rstd) override;

  void rope_forward(Tensor x, Tensor inv_freq, Tensor positions) override;
  void rope_backward(Tensor dx, Tensor inv_freq, Tensor positions) override;

  void swiglu_forward(Tensor h, Tensor gate, Tensor up) override;
  void swiglu_backward(Tensor dgate, Tensor dup, Tensor dh, Tensor gate, Tensor up) override;
  void relu_forward(Tensor y, Tensor x) override;
  void relu_backward(Tensor dx, Tensor dy, Tensor y) override;

  void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, Tensor positions,
                         float scale) override;
  void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k,
                          Tensor v, Tensor out, Tensor lse, Tensor positions, float scale) override;
  void attention_cached_forward(Tensor out, Tensor q, Tensor k, Tensor v, float scale) override;  // cuda_attention_cached.cu

  double cross_entropy(Tensor logits, Tensor targets, Tensor mask, float grad_scale) override;
  // No synchronisation: the sum is added on the device (same bits as cross_entropy's), bad
  // masks/targets set a DeferredError bit that the next synchronisation reports.
  void cross_entropy_accumulate(Tensor logits, Tensor targets, Tensor mask, float grad_scale,
                                Tensor loss_sum) override;

  void dropout(Tensor out, Tensor in, float p, RngKey key, Tensor row_ids) override;

  void dequantize_4bit(Tensor out, const Quant4View& weight) override;
  void quantize_blocks(Tensor q, Tensor scales, Tensor in, int bits, int64_t block) override;
  void dequantize_blocks(Tensor out, Tensor q, Tensor scales, int bits, int64_t block, bool accumulate) override;

  // Its optimizer kernels run on this backend's stream (cuda_optimizer_kernels.h).
  OptimizerKernels& optimizer_kernels() override { return optimizer_kernels_; }

  // ---- for the op files -----------------------------------------------------------------
  cudaStream_t stream() const { return stream_; }
  int multiprocessors() const { return multiprocessors_; }
  size_t max_shared_memory_per_block() const { return max_shared_memory_; }
  // uint64[kStatusSlots] on the device, written by kernels that validate indices.
  uint64_t* device_status() const { return device_status_; }
  // Sets status word kFirstBadRow to "none" (queued on the stream).
  void reset_first_bad_row();
  // Synchronises the stream, throws on deferred kernel errors, and returns kFirstBadRow.
  uint64_t first_bad_row();
  // Copies `bytes` from device to host and waits (throws on deferred kernel errors): one wait,
  // through a pinned bounce buffer for small reads (a copy into pageable memory would be a
  // synchronous copy plus the stream synchronisation).
  void download(void* host, const void* device, size_t bytes);
  // Queues a copy of `bytes` host bytes to the device through pinned staging; returns at once
  // (`host` may be reused). bytes <= HostStaging::kMaxUploadBytes.
  void upload(void* device, const void* host, size_t bytes) { staging_->upload(device, host, bytes); }
  // Waits for an event recorded by record_event() and throws on the deferred kernel errors of
  // the work before it, as synchronize() does.
  void wait_for_event(cudaEvent_t event);
  // An event recorded on `stream` (record_event's kind); the cudaEvent of one (or null for an
  // event of another backend: already complete).
  std::unique_ptr<BackendEvent> record_event_on(cudaStream_t stream);
  static cudaEvent_t cuda_event_of(const BackendEvent* event);
  // transfer_async's queue toward `dst` (created on first use): one per direction, so that an
  // upload and a download run at once on a GPU's two copy engines.
  cudaStream_t transfer_stream(Device dst);
  // Host copies of int32 uploads (positions of packed rows): see cuda_upload_mirror.h.
  const UploadMirror& uploads() const { return uploads_; }
  // cuDNN's attention graphs and handle, made on first use.
  CudnnAttention& cudnn_attention();
  // A buffer an op keeps to itself (partial sums, conversion staging, cuDNN's workspace), most
  // freed before the op returns: allocated as any other, but ZT_ALLOCATION_LOG lists it as
  // "scratch", apart from the run's buffers the memory model counts (backend/allocation_log.h).
  Buffer scratch(size_t bytes);

 private:
  // Keeps uploads_ current for a copy into dst (before it is queued).
  void note_copy(const Tensor& dst, const Tensor& src);
  void check_deferred_errors();
  // C = alpha op(A) op(B) + beta C through a cached cuBLASLt plan, plus bias[N] broadcast over
  // rows in the epilogue when `bias` is not empty (bias in C's dtype). Arguments checked by the
  // caller; M, N, K > 0. Returns false, having queued nothing, when cuBLASLt has no algorithm
  // with the bias epilogue for the problem (never for a plain GEMM: that throws).
  bool run_gemm(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b,
                const GemmDims& dims, float alpha, float beta, Tensor bias);

  int device_ = 0;
  CudaBackendOptions options_;
  int multiprocessors_ = 0;
  size_t max_shared_memory_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t transfer_streams_[2] = {nullptr, nullptr};  // transfer_async's: toward the device, the host
  cublasLtHandle_t lt_handle_ = nullptr;
  CachingAllocator allocator_;
  std::unique_ptr<DiscardableMemory> discardable_;  // made once the stream exists
  size_t peak_bytes_ = 0;                           // of memory_in_use()
  void note_peak() { peak_bytes_ = std::max(peak_bytes_, memory_in_use()); }
  bool allocating_scratch_ = false;  // scratch() is allocating: the log says so
  void* gemm_workspace_ = nullptr;  // cuBLASLt workspace [kGemmWorkspaceBytes]
  std::unique_ptr<GemmPlans, GemmPlansDeleter> gemm_plans_;
  uint64_t* device_status_ = nullptr;  // [kStatusSlots] device
  uint64_t* host_status_ = nullptr;    // [kStatusSlots] pinned host mirror
  static constexpr size_t kBounceBytes = size_t{64} << 10;  // download()'s pinned bounce buffer
  void* bounce_ = nullptr;             // [kBounceBytes] pinned host
  std::unique_ptr<HostStaging> staging_;  // small uploads (copy() host -> device)
  // Shared with the live events, which give their cudaEvent back to it when destroyed (also
  // after the backend is gone: the last owner destroys the pool's events).
  std::shared_ptr<EventPool> event_pool_;
  UploadMirror uploads_;
  CudaOptimizerKernels optimizer_kernels_{*this};  // borrows the stream and the allocator
  std::unique_ptr<CudnnAttention> cudnn_attention_;  // destroyed before the stream (declared last)
};

}  // namespace zt::cuda
