// Discardable device memory on CUDA's virtual memory management (see cuda_vmm.h).
#include "backend/cuda/cuda_vmm.h"

#include <cuda.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_memory_limit.h"
#include "core/error.h"

namespace zt::cuda {

// The driver functions, from cudaGetDriverEntryPointByVersion (no link against libcuda).
struct DiscardableMemory::Driver {
  CUresult (*get_granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
};

namespace {

// The first CUDA version with every function above in its current form.
constexpr unsigned int kDriverApiVersion = 12000;

template <typename Function>
bool load(const char* symbol, Function* function) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &pointer, kDriverApiVersion, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || pointer == nullptr) {
    cudaGetLastError();  // not an error of a later call
    return false;
  }
  *function = reinterpret_cast<Function>(pointer);
  return true;
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

DiscardableMemory::DiscardableMemory(int device, cudaStream_t stream)
    : device_(device), stream_(stream), driver_(std::make_unique<Driver>()) {
  Driver& d = *driver_;
  const bool loaded = load("cuMemGetAllocationGranularity", &d.get_granularity) &&
                      load("cuMemAddressReserve", &d.address_reserve) && load("cuMemAddressFree", &d.address_free) &&
                      load("cuMemCreate", &d.create) && load("cuMemRelease", &d.release) &&
                      load("cuMemMap", &d.map) && load("cuMemSetAccess", &d.set_access) &&
                      load("cuMemUnmap", &d.unmap) && load("cuGetErrorString", &d.error_string) &&
                      load("cuDeviceGet", &d.device_get) && load("cuDeviceGetAttribute", &d.device_attribute);
  if (!loaded) {
    unsupported_reason_ = "the CUDA driver does not provide the virtual memory management functions";
    return;
  }
  int attribute = 0;
  CUdevice handle = 0;
  if (d.device_get(&handle, device) != CUDA_SUCCESS ||
      d.device_attribute(&attribute, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, handle) != CUDA_SUCCESS ||
      !attribute) {
    unsupported_reason_ = "device " + std::to_string(device) + " does not support virtual memory management";
    return;
  }
  const CUmemAllocationProp prop = device_memory(device);
  if (d.get_granularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !granularity_) {
    unsupported_reason_ = "cuMemGetAllocationGranularity failed";
    return;
  }
  supported_ = true;
}

DiscardableMemory::~DiscardableMemory() {
  // Destructors must not throw: failures (a device already lost) are ignored.
  for (PendingDiscard& pending : pending_) cudaEventDestroy(pending.event);
  for (auto& [base, range] : ranges_) {
    for (size_t i = 0; i < range.handles.size(); ++i) {
      if (!range.handles[i]) continue;
      driver_->unmap(static_cast<CUdeviceptr>(base + i * granularity_), granularity_);
      driver_->release(range.handles[i]);
      uncharge_device_memory(granularity_);
    }
    driver_->address_free(static_cast<CUdeviceptr>(base), range.bytes);
  }
}

// Throws a zt::Error naming the driver call and its error text.
#define ZT_CU_CHECK(call)                                                                                  \
  do {                                                                                                     \
    const CUresult zt_cu_status = (call);                                                                  \
    if (zt_cu_status != CUDA_SUCCESS) {                                                                    \
      const char* zt_cu_text = nullptr;                                                                    \
      driver_->error_string(zt_cu_status, &zt_cu_text);                                                    \
      fail("cuda: ", #call, " failed on device ", device_, " (rank ", process_rank(), "): ",               \
           zt_cu_text ? zt_cu_text : "unknown error", " (CUresult ", static_cast<int>(zt_cu_status), ")"); \
    }                                                                                                      \
  } while (0)

void* DiscardableMemory::allocate(size_t bytes, bool committed) {
  if (!supported_) return nullptr;
  Range range;
  range.bytes = std::max<size_t>((bytes + granularity_ - 1) / granularity_, 1) * granularity_;
  range.handles.assign(range.bytes / granularity_, 0);
  range.discard_seq.assign(range.bytes / granularity_, 0);
  range.residency = std::make_unique<ChunkResidency>(range.bytes, granularity_, committed);
  CUdeviceptr base = 0;
  ZT_CU_CHECK(driver_->address_reserve(&base, range.bytes, granularity_, 0, 0));
  const uintptr_t address = static_cast<uintptr_t>(base);
  auto [slot, inserted] = ranges_.emplace(address, std::move(range));
  (void)inserted;
  try {
    if (committed)
      for (size_t i = 0; i < slot->second.handles.size(); ++i) map_chunk(address, slot->second, i);
  } catch (...) {
    release(reinterpret_cast<void*>(address));
    throw;
  }
  return reinterpret_cast<void*>(address);
}

bool DiscardableMemory::owns(const void* pointer) const {
  return ranges_.count(reinterpret_cast<uintptr_t>(pointer)) > 0;
}

bool DiscardableMemory::contains(const void* pointer) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  auto after = ranges_.upper_bound(address);
  if (after == ranges_.begin()) return false;
  auto found = std::prev(after);
  return address < found->first + found->second.bytes;
}

void DiscardableMemory::release(void* pointer) {
  auto found = ranges_.find(reinterpret_cast<uintptr_t>(pointer));
  ZT_CHECK(found != ranges_.end(), "DiscardableMemory::release: ", pointer, " is not a discardable buffer");
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may still use it
  for (size_t i = 0; i < found->second.handles.size(); ++i)
    if (found->second.handles[i]) unmap_chunk(found->first, found->second, i);
  ZT_CU_CHECK(driver_->address_free(static_cast<CUdeviceptr>(found->first), found->second.bytes));
  ranges_.erase(found);
}

DiscardableMemory::Range& DiscardableMemory::range_of(const void* pointer, size_t bytes, const char* call,
                                                      uintptr_t* base) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  auto after = ranges_.upper_bound(address);
  ZT_CHECK(after != ranges_.begin(), call, ": ", pointer, " is not in a discardable buffer");
  auto found = std::prev(after);
  ZT_CHECK(address + bytes <= found->first + found->second.bytes, call, ": ", bytes, " bytes at ", pointer,
           " run past the discardable buffer of ", found->second.bytes, " bytes");
  *base = found->first;
  return found->second;
}

void DiscardableMemory::map_chunk(uintptr_t base, Range& range, size_t index) {
  const CUmemAllocationProp prop = device_memory(device_);
  const CUdeviceptr at = static_cast<CUdeviceptr>(base + index * granularity_);
  CUmemGenericAllocationHandle handle = 0;
  charge_device_memory(granularity_, device_, "a virtual-memory chunk");  // throws past ZT_DEVICE_MEMORY_LIMIT
  const CUresult created = driver_->create(&handle, granularity_, &prop, 0);
  if (created != CUDA_SUCCESS) uncharge_device_memory(granularity_);
  ZT_CU_CHECK(created);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult mapped = driver_->map(at, granularity_, 0, handle, 0);
  if (mapped != CUDA_SUCCESS) {
    driver_->release(handle);
    uncharge_device_memory(granularity_);
  }
  ZT_CU_CHECK(mapped);
  ZT_CU_CHECK(driver_->set_access(at, granularity_, &access, 1));
  range.handles[index] = handle;
  range.discard_seq[index] = 0;
  range.residency->set_resident(index, true);
  physical_bytes_ += granularity_;
  peak_bytes_ = std::max(peak_bytes_, physical_bytes_);
}

void DiscardableMemory::unmap_chunk(uintptr_t base, Range& range, size_t index) {
  ZT_CU_CHECK(driver_->unmap(static_cast<CUdeviceptr>(base + index * granularity_), granularity_));
  ZT_CU_CHECK(driver_->release(range.handles[index]));
  uncharge_device_memory(granularity_);
  range.handles[index] = 0;
  range.discard_seq[index] = 0;
  range.residency->set_resident(index, false);
  physical_bytes_ -= granularity_;
}

void DiscardableMemory::discard(const void* pointer, size_t bytes) {
  if (!bytes) return;
  uintptr_t base = 0;
  Range& range = range_of(pointer, bytes, "discard", &base);
  const std::vector<size_t> freed = range.residency->discard(reinterpret_cast<uintptr_t>(pointer) - base, bytes);
  bool newly = false;
  for (size_t chunk : freed) {
    if (range.discard_seq[chunk]) continue;  // already waiting for an earlier discard
    range.discard_seq[chunk] = next_seq_;
    newly = true;
  }
  if (!newly) return;
  // Their unmapping waits for the work queued so far, which may still use them.
  PendingDiscard pending;
  pending.seq = next_seq_++;
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&pending.event, cudaEventDisableTiming));
  ZT_CUDA_CHECK(cudaEventRecord(pending.event, stream_));
  pending_.push_back(pending);
}

void DiscardableMemory::commit(const void* pointer, size_t bytes) {
  if (!bytes) return;
  uintptr_t base = 0;
  Range& range = range_of(pointer, bytes, "commit", &base);
  const size_t offset = reinterpret_cast<uintptr_t>(pointer) - base;
  const std::vector<size_t> needed = range.residency->commit(offset, bytes);
  // Chunks whose unmapping is pending are simply kept (their discard no longer covers them).
  for (size_t chunk = offset / granularity_; chunk <= (offset + bytes - 1) / granularity_; ++chunk)
    range.discard_seq[chunk] = 0;
  if (needed.empty()) return;
  // Give back what earlier discards freed before taking more: the device never holds both.
  reclaim(true);
  for (size_t chunk : needed) map_chunk(base, range, chunk);
}

void DiscardableMemory::reclaim(bool wait) {
  if (pending_.empty()) return;
  // Events complete in stream order: the completed ones are a prefix.
  size_t completed = 0;
  if (wait) {
    ZT_CUDA_CHECK(cudaEventSynchronize(pending_.back().event));
    completed = pending_.size();
  } else {
    while (completed < pending_.size()) {
      const cudaError_t status = cudaEventQuery(pending_[completed].event);
      if (status == cudaErrorNotReady) {
        cudaGetLastError();
        break;
      }
      ZT_CUDA_CHECK(status);
      ++completed;
    }
  }
  if (!completed) return;
  const uint64_t done = pending_[completed - 1].seq;  // discards up to this one have completed
  for (size_t i = 0; i < completed; ++i) ZT_CUDA_CHECK(cudaEventDestroy(pending_[i].event));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(completed));
  for (auto& [base, range] : ranges_)
    for (size_t i = 0; i < range.handles.size(); ++i)
      if (range.handles[i] && range.discard_seq[i] && range.discard_seq[i] <= done) unmap_chunk(base, range, i);
}

}  // namespace zt::cuda
