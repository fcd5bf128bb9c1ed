// Discardable device memory on CUDA's virtual memory management (see cuda_vmm.h).
#include "backend/cuda/cuda_vmm.h"

#include <cuda.h>

#include <algorithm>
#include <utility>

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
  for (DiscardEvent& pending : events_) cudaEventDestroy(pending.event);
  for (auto& [base, range] : ranges_) {
    for (auto& [first, piece] : range.pieces) {
      const size_t bytes = range.residency->extents().at(first) * granularity_;
      driver_->unmap(static_cast<CUdeviceptr>(base + first * granularity_), bytes);
      driver_->release(piece.handle);
      uncharge_device_memory(bytes);
    }
    driver_->address_free(static_cast<CUdeviceptr>(base), range.bytes);
  }
}

// Throws a zt::Error naming the driver call, its bytes and address (0: none), and the driver's
// error text.
void DiscardableMemory::check(int status, const char* call, uintptr_t address, size_t bytes) const {
  if (status == CUDA_SUCCESS) return;
  const char* text = nullptr;
  driver_->error_string(static_cast<CUresult>(status), &text);
  const std::string where = address ? cat(" at ", reinterpret_cast<const void*>(address)) : "";
  fail("cuda: ", call, " of ", bytes, " bytes", where, " failed on device ", device_, " (rank ", process_rank(),
       "): ", text ? text : "unknown error", " (CUresult ", status, ")");
}

void* DiscardableMemory::allocate(size_t bytes, bool committed) {
  if (!supported_) return nullptr;
  Range range;
  bytes = std::max<size_t>(bytes, 1);
  range.bytes = (bytes + granularity_ - 1) / granularity_ * granularity_;
  range.residency = std::make_unique<ChunkResidency>(bytes, granularity_, committed);  // committed: one extent
  CUdeviceptr base = 0;
  check(driver_->address_reserve(&base, range.bytes, granularity_, 0, 0), "cuMemAddressReserve", 0, range.bytes);
  const uintptr_t address = static_cast<uintptr_t>(base);
  Range& slot = ranges_.emplace(address, std::move(range)).first->second;
  try {
    std::vector<Extent> extents;
    for (const auto& [first, count] : slot.residency->extents()) extents.push_back(Extent{first, count});
    map_extents(address, slot, extents, std::vector<unsigned long long>(extents.size(), 0));
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
  if (!events_.empty()) completed_seq_ = events_.back().seq;
  forget_completed();
  pool_.forget(found->second.residency.get());
  unmap_all(found->first, found->second);
  check(driver_->address_free(static_cast<CUdeviceptr>(found->first), found->second.bytes), "cuMemAddressFree",
        found->first, found->second.bytes);
  ranges_.erase(found);
}

// Unmaps and releases every extent of `range` (its work is done).
void DiscardableMemory::unmap_all(uintptr_t base, Range& range) {
  while (!range.pieces.empty()) {
    const auto [first, piece] = *range.pieces.begin();
    const Extent extent{first, range.residency->extents().at(first)};
    const uintptr_t at = base + first * granularity_;
    check(driver_->unmap(static_cast<CUdeviceptr>(at), extent.count * granularity_), "cuMemUnmap", at,
          extent.count * granularity_);
    range.residency->set_mapped(extent, false);
    range.pieces.erase(first);
    check(give_back(piece.handle, extent.count * granularity_), "cuMemRelease", at, extent.count * granularity_);
  }
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

std::pair<uintptr_t, DiscardableMemory::Range*> DiscardableMemory::range_holding(const ChunkResidency* residency) {
  for (auto& [base, range] : ranges_)
    if (range.residency.get() == residency) return {base, &range};
  fail("DiscardableMemory: a held extent of no live buffer");
}

// ---- physical allocations and mappings -----------------------------------------------------------

// A physical allocation of `bytes` (a multiple of the granularity), counted against
// the device-memory limit and in physical_bytes().
unsigned long long DiscardableMemory::create(size_t bytes) {
  const CUmemAllocationProp prop = device_memory(device_);
  charge_device_memory(bytes, device_, "a virtual-memory extent");  // throws past the device-memory limit
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = driver_->create(&handle, bytes, &prop, 0);
  if (created != CUDA_SUCCESS) uncharge_device_memory(bytes);
  check(created, "cuMemCreate", 0, bytes);
  physical_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, physical_bytes_);
  return handle;
}

// Releases an allocation of `bytes` that is mapped nowhere; the caller checks the result (or,
// cleaning up after another failure, ignores it).
int DiscardableMemory::give_back(unsigned long long handle, size_t bytes) {
  physical_bytes_ -= bytes;
  uncharge_device_memory(bytes);
  return driver_->release(handle);
}

// Maps `handle` (of `bytes`) at `at`, readable and writable. On a failure nothing stays mapped
// and the allocation is released.
void DiscardableMemory::map(uintptr_t at, size_t bytes, unsigned long long handle) {
  const CUdeviceptr address = static_cast<CUdeviceptr>(at);
  const CUresult mapped = driver_->map(address, bytes, 0, handle, 0);
  CUresult access = CUDA_SUCCESS;
  if (mapped == CUDA_SUCCESS) {
    CUmemAccessDesc desc{};
    desc.location = device_memory(device_).location;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access = driver_->set_access(address, bytes, &desc, 1);
    if (access != CUDA_SUCCESS) driver_->unmap(address, bytes);  // the error below is the one to report
  }
  if (mapped == CUDA_SUCCESS && access == CUDA_SUCCESS) return;
  give_back(handle, bytes);
  check(mapped, "cuMemMap", at, bytes);
  check(access, "cuMemSetAccess", at, bytes);
}

// Maps `extents` of `range`, extent i with handles[i] (of its size) or, where that is 0, a new
// allocation. On a failure the handles not mapped yet are released too, so nothing leaks.
void DiscardableMemory::map_extents(uintptr_t base, Range& range, const std::vector<Extent>& extents,
                                    std::vector<unsigned long long> handles) {
  size_t i = 0;
  try {
    for (; i < extents.size(); ++i) {
      const size_t bytes = extents[i].count * granularity_;
      const unsigned long long handle = handles[i] ? handles[i] : create(bytes);
      handles[i] = 0;  // map() releases it on a failure
      map(base + extents[i].first * granularity_, bytes, handle);
      range.residency->set_mapped(extents[i], true);
      range.pieces[extents[i].first] = Piece{handle, 0};
    }
  } catch (...) {
    for (size_t j = i; j < extents.size(); ++j)
      if (handles[j]) give_back(handles[j], extents[j].count * granularity_);
    throw;
  }
}

// ---- discard and commit ----------------------------------------------------------------------------

void DiscardableMemory::discard(const void* pointer, size_t bytes) {
  if (!bytes) return;
  uintptr_t base = 0;
  Range& range = range_of(pointer, bytes, "discard", &base);
  std::vector<Extent> newly;  // wholly discarded now, and not held already
  for (Extent extent : range.residency->discard(reinterpret_cast<uintptr_t>(pointer) - base, bytes))
    if (!pool_.holds(range.residency.get(), extent)) newly.push_back(extent);
  if (newly.empty()) return;
  // Their unmapping waits for the work queued so far, which may still use them.
  const uint64_t seq = record_discard();
  for (Extent extent : newly) range.pieces.at(extent.first).discard_seq = seq;
  pool_.discarded(range.residency.get(), newly);
}

void DiscardableMemory::commit(const void* pointer, size_t bytes) {
  if (!bytes) return;
  uintptr_t base = 0;
  Range& range = range_of(pointer, bytes, "commit", &base);
  const std::vector<Extent> needed = range.residency->commit(reinterpret_cast<uintptr_t>(pointer) - base, bytes);
  pool_.drop_live();  // held extents this range covers are in use again
  if (needed.empty()) return;
  map_extents(base, range, needed, take_back(pool_.plan_commit(needed)));
}

// The plan's held extents unmapped (their discards complete); the released ones released.
// Returns, per extent to map, the allocation it reuses or 0.
std::vector<unsigned long long> DiscardableMemory::take_back(const PhysicalPool::Plan& plan) {
  std::vector<unsigned long long> handles(plan.sources.size(), 0);
  try {
    for (const PhysicalPool::Held& released : plan.released) {
      const size_t bytes = released.extent.count * granularity_;
      check(give_back(unmap_held(released), bytes), "cuMemRelease", 0, bytes);
    }
    for (size_t i = 0; i < plan.sources.size(); ++i)
      if (plan.sources[i]) handles[i] = unmap_held(*plan.sources[i]);
  } catch (...) {
    for (size_t i = 0; i < handles.size(); ++i)
      if (handles[i]) give_back(handles[i], plan.sources[i]->extent.count * granularity_);
    throw;
  }
  return handles;
}

// Unmaps a held extent once its discard's event has completed; returns its allocation.
unsigned long long DiscardableMemory::unmap_held(const PhysicalPool::Held& held) {
  auto [base, range] = range_holding(held.residency);
  const Piece piece = range->pieces.at(held.extent.first);
  wait_for(piece.discard_seq);
  const uintptr_t at = base + held.extent.first * granularity_;
  const size_t bytes = held.extent.count * granularity_;
  const CUresult unmapped = driver_->unmap(static_cast<CUdeviceptr>(at), bytes);
  if (unmapped != CUDA_SUCCESS) {  // the extent stays mapped and in use: released with its buffer
    range->pieces.at(held.extent.first).discard_seq = 0;
    check(unmapped, "cuMemUnmap", at, bytes);
  }
  range->residency->set_mapped(held.extent, false);
  range->pieces.erase(held.extent.first);
  return piece.handle;
}

// ---- discard events ---------------------------------------------------------------------------------

uint64_t DiscardableMemory::record_discard() {
  DiscardEvent pending;
  pending.seq = next_seq_++;
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&pending.event, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(pending.event, stream_);
  if (recorded != cudaSuccess) cudaEventDestroy(pending.event);
  ZT_CUDA_CHECK(recorded);
  events_.push_back(pending);
  return pending.seq;
}

// Returns once the discard `seq` has completed: events that have (cudaEventQuery) are forgotten
// without waiting; the host waits (cudaEventSynchronize) only for one that has not, which
// physical_pool.h's rule asks of discards before the previous mapping commit only.
void DiscardableMemory::wait_for(uint64_t seq) {
  forget_completed();
  if (seq <= completed_seq_) return;
  auto event = std::find_if(events_.begin(), events_.end(), [&](const DiscardEvent& e) { return e.seq == seq; });
  ZT_CHECK(event != events_.end(), "DiscardableMemory: no event for discard ", seq);
  ZT_CUDA_CHECK(cudaEventSynchronize(event->event));
  completed_seq_ = seq;  // events complete in stream order
  forget_completed();
}

// Destroys the events known complete (those up to completed_seq_, then those cudaEventQuery
// finds complete, in stream order).
void DiscardableMemory::forget_completed() {
  while (!events_.empty()) {
    if (events_.front().seq > completed_seq_) {
      const cudaError_t status = cudaEventQuery(events_.front().event);
      if (status == cudaErrorNotReady) {
        cudaGetLastError();  // not an error of a later call
        return;
      }
      ZT_CUDA_CHECK(status);
      completed_seq_ = events_.front().seq;
    }
    ZT_CUDA_CHECK(cudaEventDestroy(events_.front().event));
    events_.pop_front();
  }
}

void DiscardableMemory::synchronized() {
  if (!events_.empty()) completed_seq_ = events_.back().seq;
  forget_completed();
  pool_.synchronized();
}

}  // namespace zt::cuda
