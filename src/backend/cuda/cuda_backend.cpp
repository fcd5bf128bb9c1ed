// The CUDA backend's set-up and tear-down (device, stream, cuBLASLt handle, workspace, status
// words), its shared argument checks, synchronisation with deferred kernel errors, events
// (record_event() from a pool of reusable cudaEvents), the pinned host backend, and the
// factory make_cuda_backend().
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/allocation_log.h"
#include "backend/cuda/cuda_attention_cudnn.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_vmm.h"
#include "backend/cuda/cuda_memory_limit.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace zt {
namespace cuda {

// ---- argument checks ------------------------------------------------------------------------

void expect_device(const char* op, const char* arg, const Tensor& tensor) {
  ZT_CHECK(tensor.device == Device::CUDA, op, ": ", arg,
           " must be device memory of the cuda backend, got ", tensor.describe());
  ZT_CHECK(tensor.data != nullptr || tensor.numel() == 0, op, ": ", arg,
           " has no data (empty view ", tensor.describe(), ")");
}

void expect_device(const char* op, const char* arg, const Tensor& tensor, DType dtype) {
  expect_device(op, arg, tensor);
  ZT_CHECK(tensor.dtype == dtype, op, ": ", arg, " must be ", dtype_name(dtype), ", got ",
           tensor.describe());
}

void expect_device_float(const char* op, const char* arg, const Tensor& tensor) {
  expect_device(op, arg, tensor);
  ZT_CHECK(is_float(tensor.dtype), op, ": ", arg, " must be fp32, bf16 or fp16, got ",
           tensor.describe());
}

void expect_same_dtype(const char* op, const char* arg, const Tensor& tensor,
                       const char* other_arg, const Tensor& other) {
  ZT_CHECK(tensor.dtype == other.dtype, op, ": ", arg, " ", tensor.describe(), " must have the dtype of ",
           other_arg, " ", other.describe());
}

void expect_device_like(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                        const Tensor& other) {
  expect_device(op, arg, tensor);
  expect_same_shape(op, arg, tensor, other_arg, other);
  expect_same_dtype(op, arg, tensor, other_arg, other);
}

const int32_t* positions_data(const char* op, const Tensor& positions, int64_t batch, int64_t time) {
  if (positions.empty()) return nullptr;
  expect_device(op, "positions", positions, DType::I32);
  expect_numel(op, "positions", positions, batch * time, "B*T");
  return static_cast<const int32_t*>(positions.data);
}

MatrixShape matrix_shape(const char* op, const char* arg, const Tensor& tensor) {
  ZT_CHECK(tensor.ndim >= 1, op, ": ", arg, " must have at least one dimension, got ",
           tensor.describe());
  MatrixShape shape;
  shape.cols = tensor.dim(-1);
  shape.rows = 1;  // the product of the leading dimensions (also when there are no columns)
  for (int i = 0; i + 1 < tensor.ndim; ++i) shape.rows *= tensor.dim(i);
  return shape;
}

// ---- events ------------------------------------------------------------------------------------

// Reusable cudaEvents, timing disabled (cheaper to record and to wait for). cudaEventCreate is
// a driver call and the ZeRO engine records a few events every step, so destroyed events come
// back here; at most kMaxCached are kept, the others are destroyed. One backend per thread (as
// the caching allocator), so no lock.
class EventPool {
 public:
  EventPool() { cached_.reserve(kMaxCached); }  // so give_back() never allocates
  ~EventPool() {
    for (cudaEvent_t event : cached_) destroy(event);
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t acquire() {
    if (!cached_.empty()) {
      const cudaEvent_t event = cached_.back();
      cached_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }

  // An event still pending may come back: recording it again later replaces what it tracks.
  void give_back(cudaEvent_t event) noexcept {
    if (cached_.size() < kMaxCached) {
      cached_.push_back(event);  // within the reserved capacity: cannot throw
    } else {
      destroy(event);
    }
  }

 private:
  // Called from destructors, which must not throw: a failure (at process exit the runtime may
  // be unloaded already) is dropped, and cleared from the runtime's last error, or the next
  // ZT_CUDA_CHECK_LAUNCH would report it as its kernel's.
  static void destroy(cudaEvent_t event) noexcept {
    if (cudaEventDestroy(event) != cudaSuccess) cudaGetLastError();
  }

  static constexpr size_t kMaxCached = 16;
  std::vector<cudaEvent_t> cached_;
};

namespace {

// record_event()'s result: a pool event recorded on the backend's stream, given back to the
// pool when destroyed.
class CudaEvent final : public BackendEvent {
 public:
  CudaEvent(CudaBackendImpl& backend, std::shared_ptr<EventPool> pool)
      : backend_(backend), pool_(std::move(pool)), event_(pool_->acquire()) {}
  ~CudaEvent() override { pool_->give_back(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void wait() override { backend_.wait_for_event(event_); }
  cudaEvent_t event() const { return event_; }

 private:
  CudaBackendImpl& backend_;
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace

// ---- set-up -----------------------------------------------------------------------------------

CudaBackendImpl::CudaBackendImpl(int device, CudaBackendOptions options)
    : device_(device), options_(options),
      allocator_(device, options.caching_allocator.value_or(CachingAllocator::caching_by_default())) {
  const int count = cuda_device_count();
  ZT_CHECK(device >= 0 && device < count, "cuda backend: device ", device, " does not exist (rank ",
           process_rank(), " sees ", count, " CUDA devices)");
  ZT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp properties;
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  device_name_ = properties.name;
  // bf16 arithmetic and the kernels' shared-memory sizes assume Ampere or newer; the build
  // carries sm_80/sm_90 code and compute_80 PTX that newer GPUs compile at load time.
  ZT_CHECK(properties.major >= 8, "cuda backend: device ", device, " (", device_name_,
           ") has compute capability ", properties.major, ".", properties.minor,
           "; zerotune needs 8.0 (Ampere) or newer");
  multiprocessors_ = properties.multiProcessorCount;
  max_shared_memory_ = properties.sharedMemPerBlockOptin;
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  discardable_ = std::make_unique<DiscardableMemory>(device, stream_);
  ZT_CUBLAS_CHECK(cublasLtCreate(&lt_handle_));
  gemm_plans_ = make_gemm_plans();
  gemm_workspace_ = allocator_.allocate(kGemmWorkspaceBytes);
  device_status_ = static_cast<uint64_t*>(allocator_.allocate(kStatusSlots * sizeof(uint64_t)));
  ZT_CUDA_CHECK(cudaMallocHost(&host_status_, kStatusSlots * sizeof(uint64_t)));
  ZT_CUDA_CHECK(cudaMallocHost(&bounce_, kBounceBytes));
  staging_ = std::make_unique<HostStaging>(stream_);
  ZT_CUDA_CHECK(cudaMemsetAsync(device_status_, 0, kStatusSlots * sizeof(uint64_t), stream_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  event_pool_ = std::make_shared<EventPool>();
  note_peak();
}

CudaBackendImpl::~CudaBackendImpl() {
  // Destructors must not throw: failures here (a lost device) are ignored.
  if (stream_) cudaStreamSynchronize(stream_);
  cudnn_attention_.reset();  // its handle is bound to stream_; its buffers go back to allocator_
  if (host_status_) cudaFreeHost(host_status_);
  if (bounce_) cudaFreeHost(bounce_);
  staging_.reset();  // after the stream synchronisation above
  if (lt_handle_) cublasLtDestroy(lt_handle_);
  for (cudaStream_t transfers : transfer_streams_)
    if (transfers) cudaStreamSynchronize(transfers);
  if (stream_) cudaStreamDestroy(stream_);
  for (cudaStream_t transfers : transfer_streams_)
    if (transfers) cudaStreamDestroy(transfers);
  // allocator_ (a member) frees the workspace, the status words and every cached block.
}

CudnnAttention& CudaBackendImpl::cudnn_attention() {
  if (!cudnn_attention_) cudnn_attention_ = std::make_unique<CudnnAttention>(*this);
  return *cudnn_attention_;
}

std::string CudaBackendImpl::name() const { return cat("cuda:", device_, " (", device_name_, ")"); }

// ---- memory ------------------------------------------------------------------------------------

void* CudaBackendImpl::allocate(size_t bytes) {
  void* pointer = allocator_.allocate(bytes);
  note_peak();
  log_allocation("cuda", bytes, pointer, allocating_scratch_);
  return pointer;
}

Buffer CudaBackendImpl::scratch(size_t bytes) {
  allocating_scratch_ = true;
  try {
    Buffer buffer(*this, bytes);
    allocating_scratch_ = false;
    return buffer;
  } catch (...) {
    allocating_scratch_ = false;
    throw;
  }
}

void* CudaBackendImpl::allocate_discardable(size_t bytes, bool committed) {
  void* pointer = discardable_->allocate(bytes, committed);
  if (!pointer) {  // no virtual memory management: a plain buffer, whose discard gives nothing back
    static bool warned = false;
    if (!warned && process_rank() <= 0)
      std::fprintf(stderr, "zerotune: warning: %s; ZeRO stages 2 and 3 keep full-size buffers on the device\n",
                   discardable_->unsupported_reason().c_str());
    warned = true;
    return allocate(bytes);
  }
  note_peak();
  log_allocation("cuda", bytes, pointer);
  return pointer;
}

void CudaBackendImpl::release(void* pointer) {
  log_release("cuda", pointer);
  uploads_.note_release(pointer);
  if (discardable_ && discardable_->owns(pointer)) discardable_->release(pointer);
  else allocator_.release(pointer);
}

size_t CudaBackendImpl::memory_in_use() const { return allocator_.bytes_in_use() + discardable_->physical_bytes(); }
size_t CudaBackendImpl::memory_reserved() const { return allocator_.bytes_reserved() + discardable_->physical_bytes(); }
size_t CudaBackendImpl::discardable_bytes() const { return discardable_->physical_bytes(); }
size_t CudaBackendImpl::discardable_peak() const { return discardable_->peak_physical_bytes(); }
size_t CudaBackendImpl::discard_granularity() const { return discardable_->granularity(); }

void CudaBackendImpl::reset_peak() {
  peak_bytes_ = memory_in_use();
  discardable_->reset_peak();
}

void CudaBackendImpl::discard(Tensor range) {
  if (range.numel() && discardable_->contains(range.data))
    discardable_->discard(range.data, range.bytes());
}

void CudaBackendImpl::commit(Tensor range) {
  if (range.numel() && discardable_->contains(range.data)) {
    discardable_->commit(range.data, range.bytes());
    note_peak();
  }
}

}  // namespace cuda

namespace cuda {

size_t CudaBackendImpl::device_memory_used() const {
  size_t free = 0, total = 0;
  ZT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

std::optional<DeviceMemory> CudaBackendImpl::memory() const {
  DeviceMemory memory;
  memory.in_use = static_cast<int64_t>(memory_in_use());
  memory.peak = static_cast<int64_t>(memory_peak());
  memory.store_peak = static_cast<int64_t>(discardable_peak());
  memory.device_used = static_cast<int64_t>(device_memory_used());
  memory.device_free = static_cast<int64_t>(device_memory_free());
  memory.discard_granularity = static_cast<int64_t>(discard_granularity());
  const std::optional<size_t> limit = device_memory_limit();
  memory.limit = limit ? static_cast<int64_t>(*limit) : 0;
  memory.counted = static_cast<int64_t>(device_memory_counted());
  return memory;
}

MemoryTraits CudaBackendImpl::memory_traits() const {
  MemoryTraits traits;
  traits.allocation_size = cuda_allocation_size;
  traits.discard_chunk_bytes = static_cast<int64_t>(discard_granularity());
  traits.fixed_bytes = static_cast<int64_t>(memory_in_use());  // its own buffers, before a run's
  return traits;
}

CudaBackendImpl& impl_of(Backend& backend) {
  auto* impl = dynamic_cast<CudaBackendImpl*>(&backend);
  ZT_CHECK(impl != nullptr, "backend ", backend.name(), " is not the CUDA backend");
  return *impl;
}

size_t CudaBackendImpl::device_memory_free() const {
  size_t free = 0, total = 0;
  ZT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // Under the device-memory limit the device looks as small as the limit (cuda_memory_limit.h).
  if (const std::optional<size_t> limit = device_memory_limit()) {
    const size_t counted = device_memory_counted();
    free = std::min(free, *limit > counted ? *limit - counted : 0);
  }
  return free;
}

// ---- synchronisation and status words ----------------------------------------------------------

void CudaBackendImpl::reset_first_bad_row() {
  // All bytes 0xFF: UINT64_MAX, "no bad row".
  ZT_CUDA_CHECK(cudaMemsetAsync(device_status_ + kFirstBadRow, 0xFF, sizeof(uint64_t), stream_));
}

void CudaBackendImpl::check_deferred_errors() {
  const uint64_t errors = host_status_[kDeferredErrors];
  if (errors == 0) return;
  ZT_CUDA_CHECK(cudaMemsetAsync(device_status_ + kDeferredErrors, 0, sizeof(uint64_t), stream_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Every snapshot of the word queued so far (by synchronize() or record_event()) has landed:
  // clear the host copy too, so that waiting for another event does not report these again.
  host_status_[kDeferredErrors] = 0;
  const std::string found = cat(" (found by the kernel, reported at the next synchronisation of "
                                "the cuda backend on rank ", process_rank(), ")");
  ZT_CHECK(!(errors & kDropoutNegativeRowId), "dropout: row_ids held a negative global position",
           found);
  ZT_CHECK(!(errors & kCrossEntropyBadMask),
           "cross_entropy_accumulate: a mask flag was not 0 or 1", found);
  ZT_CHECK(!(errors & kCrossEntropyBadTarget),
           "cross_entropy_accumulate: a masked row's target was outside the vocabulary [0, V)",
           found);
  if (errors & (kEmbeddingForwardBadId | kEmbeddingBackwardBadId)) {
    uint64_t slots[2] = {0, 0};  // the id and the vocabulary (the error path: a synchronous read is fine)
    ZT_CUDA_CHECK(cudaMemcpy(slots, device_status_ + kBadEmbeddingId, sizeof(slots), cudaMemcpyDeviceToHost));
    fail(errors & kEmbeddingForwardBadId ? "embedding_forward" : "embedding_backward", ": an id (",
         static_cast<int32_t>(static_cast<uint32_t>(slots[0])), ") is outside the vocabulary [0, ", slots[1], ")",
         found);
  }
  fail("cuda backend: unknown deferred kernel error bits ", errors);
}

void CudaBackendImpl::synchronize() {
  ZT_CUDA_CHECK(cudaMemcpyAsync(host_status_, device_status_, kStatusSlots * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, stream_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  discardable_->synchronized();  // every discard has completed: forget their events
  check_deferred_errors();
}

void CudaBackendImpl::profiler_range(bool start) {
  ZT_CUDA_CHECK(start ? cudaProfilerStart() : cudaProfilerStop());
}

uint64_t CudaBackendImpl::first_bad_row() {
  synchronize();
  return host_status_[kFirstBadRow];
}

void CudaBackendImpl::download(void* host, const void* device, size_t bytes) {
  if (bytes > 0 && bytes <= kBounceBytes) {
    ZT_CUDA_CHECK(cudaMemcpyAsync(bounce_, device, bytes, cudaMemcpyDeviceToHost, stream_));
    synchronize();
    std::memcpy(host, bounce_, bytes);
    return;
  }
  if (bytes > 0) {
    ZT_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  synchronize();
}

std::unique_ptr<BackendEvent> CudaBackendImpl::record_event() {
  // wait() reports deferred kernel errors as synchronize() does: queue a snapshot of their word
  // (8 bytes into the pinned mirror) behind the work so far, ahead of the event.
  ZT_CUDA_CHECK(cudaMemcpyAsync(host_status_ + kDeferredErrors, device_status_ + kDeferredErrors,
                                sizeof(uint64_t), cudaMemcpyDeviceToHost, stream_));
  auto event = std::make_unique<CudaEvent>(*this, event_pool_);  // gives its event back on a throw
  ZT_CUDA_CHECK(cudaEventRecord(event->event(), stream_));
  return event;
}

std::unique_ptr<BackendEvent> CudaBackendImpl::record_event_on(cudaStream_t stream) {
  auto event = std::make_unique<CudaEvent>(*this, event_pool_);
  ZT_CUDA_CHECK(cudaEventRecord(event->event(), stream));
  return event;
}

cudaEvent_t CudaBackendImpl::cuda_event_of(const BackendEvent* event) {
  const auto* cuda_event = dynamic_cast<const CudaEvent*>(event);
  return cuda_event != nullptr ? cuda_event->event() : nullptr;
}

cudaStream_t CudaBackendImpl::transfer_stream(Device dst) {
  cudaStream_t& stream = transfer_streams_[dst == Device::CPU ? 1 : 0];
  if (stream == nullptr) ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void CudaBackendImpl::wait_for(const BackendEvent& event) {
  if (cudaEvent_t cuda_event = cuda_event_of(&event)) {
    ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda_event, 0));
  }
}

void CudaBackendImpl::wait_for_event(cudaEvent_t event) {
  ZT_CUDA_CHECK(cudaEventSynchronize(event));
  // The snapshot queued before the event has landed. A later snapshot (of a later event or
  // synchronize()) may land while it is read: it holds the same bits or more (bits are only
  // cleared once reported, after a full stream synchronisation), and every bit set is an error
  // the kernels found and nobody has reported yet, so either value is right to report.
  check_deferred_errors();
}

// ---- pinned host memory ---------------------------------------------------------------------

std::unique_ptr<Backend> CudaBackendImpl::make_host_backend() {
  // The allocator holds the device index, not the backend: the host backend may outlive it.
  const int device = device_;
  HostAllocator pinned;
  pinned.allocate = [device](size_t bytes) -> void* {
    // Pinned memory belongs to the current device's context: make it ours (also on threads
    // other than the one that made the backend).
    ZT_CUDA_CHECK(cudaSetDevice(device));
    void* pointer = nullptr;
    // At least one byte, as the CPU backend's aligned_alloc: a distinct pointer to release.
    const cudaError_t status = cudaHostAlloc(&pointer, std::max<size_t>(bytes, 1),
                                             cudaHostAllocDefault);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear it, or the next launch check would report it as its own
      fail("cuda host backend: cudaHostAlloc of ", bytes, " bytes of pinned host memory failed "
           "on rank ", process_rank(), " (device ", device, "): ", cudaGetErrorString(status), " (",
           cudaGetErrorName(status), "); pinned memory cannot be swapped out, so the node's free "
           "RAM bounds it");
    }
    // Backend::allocate promises 64-byte alignment: cudaHostAlloc gives page-aligned memory in
    // practice; checked, not assumed.
    if (reinterpret_cast<uintptr_t>(pointer) % 64 != 0) {
      cudaFreeHost(pointer);  // the error below is the one to report
      fail("cuda host backend: cudaHostAlloc of ", bytes, " bytes returned ", pointer,
           ", which is not 64-byte aligned");
    }
    return pointer;
  };
  pinned.release = [device](void* pointer) {
    if (pointer == nullptr) return;
    // At process exit the CUDA runtime may be unloaded before the last buffers die (static
    // destructors): it has given the memory back itself then.
    const cudaError_t status = cudaSetDevice(device);
    if (status == cudaErrorCudartUnloading) return;
    if (status != cudaSuccess) fail_cuda_call("cudaSetDevice(device)", status, __FILE__, __LINE__);
    const cudaError_t freed = cudaFreeHost(pointer);
    if (freed == cudaErrorCudartUnloading) return;
    if (freed != cudaSuccess) fail_cuda_call("cudaFreeHost(pointer)", freed, __FILE__, __LINE__);
  };
  return make_cpu_backend(std::move(pinned));
}

}  // namespace cuda

std::string cuda_device_pci_bus_id(int device) {
  char text[64] = {};
  ZT_CUDA_CHECK(cudaDeviceGetPCIBusId(text, static_cast<int>(sizeof(text)), device));
  return text;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the error, report none
    return 0;
  }
  return count;
}

std::unique_ptr<CudaBackend> make_cuda_backend(int device, CudaBackendOptions options) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    cudaGetLastError();
    fail("cuda backend: no CUDA device is visible to rank ", process_rank(), " (cudaGetDeviceCount: ",
         status == cudaSuccess ? "0 devices" : cudaGetErrorString(status),
         "); run on a GPU node (check nvidia-smi and CUDA_VISIBLE_DEVICES) or use the cpu backend");
  }
  return std::make_unique<cuda::CudaBackendImpl>(device, options);
}

}  // namespace zt
