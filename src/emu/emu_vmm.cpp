// The emulated device's subset of CUDA's virtual memory management (the driver API the CUDA
// backend reaches through cudaGetDriverEntryPointByVersion, so that zerotune never links
// libcuda): cuMemAddressReserve / cuMemAddressFree, cuMemCreate / cuMemRelease, cuMemMap /
// cuMemUnmap, cuMemSetAccess, cuMemGetAllocationGranularity, cuGetErrorString.
//
// A reservation is an mmap(PROT_NONE) range of host address space; physical memory is a memfd
// of the chunk's size, counted against the device's capacity (ZT_EMU_DEVICE_MEMORY) from
// cuMemCreate to cuMemRelease; cuMemMap maps the memfd into the reservation (still no access),
// cuMemSetAccess makes it readable and writable. So, as on a GPU, an access to a reserved
// address with nothing mapped (or before cuMemSetAccess) is a fault: the operand checks of
// kernels, copies and collectives report it (classify() says FreedDevice), and a stray
// dereference dies on the protection. The same physical memory keeps its contents across
// unmap and map, as on a GPU; new physical memory reads 0xFF bytes (NaN), like a new cudaMalloc.
//
// The granularity is ZT_EMU_VMM_GRANULARITY (default 64 KiB, a multiple of the 4 KiB page):
// a GPU's is 2 MiB, which would make the boundary chunks of the tests' small models dominate.
// Every entry point that changes the address space or the physical memory is counted
// (ZT_EMU_CALL_REPORT's "vmm") and can be made to fail (ZT_EMU_VMM_FAIL; docs/emulated-device.md).
#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "emu/emu_internal.h"
#include "emu/emu_runtime_memory.h"

namespace zt_emu {
namespace {

constexpr size_t kPage = 4096;

size_t granularity() {
  static const size_t value = [] {
    const size_t bytes = env_bytes("ZT_EMU_VMM_GRANULARITY", size_t{64} << 10);
    if (bytes == 0 || bytes % kPage != 0) {
      std::fprintf(stderr, "zerotune emulated device: ZT_EMU_VMM_GRANULARITY=%zu must be a positive multiple of "
                           "%zu bytes\n", bytes, kPage);
      std::abort();
    }
    return bytes;
  }();
  return value;
}

struct Physical {  // one cuMemCreate
  int fd = -1;
  size_t bytes = 0;
  int device = 0;
  int mappings = 0;
  bool released = false;
};

struct Mapping {  // one cuMemMap: [address, address + bytes) of a reservation
  size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool accessible = false;
};

struct Vmm {
  std::map<uintptr_t, size_t> reservations;  // base -> bytes
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  std::map<uintptr_t, Mapping> mappings;     // address -> mapping
  CUmemGenericAllocationHandle next_handle = 1;
};

Vmm& vmm() {
  static Vmm* const instance = new Vmm();  // never destroyed, as the arena
  return *instance;
}

using Guard = std::lock_guard<std::recursive_mutex>;

std::string& last_driver_error() {
  static std::string text;
  return text;
}

CUresult driver_fail(CUresult code, std::string message) {
  last_driver_error() = message;
  if (env_int("ZT_EMU_VERBOSE", 0) != 0) std::fprintf(stderr, "zerotune emulated device: %s\n", message.c_str());
  return code;
}

// The reservation holding [address, address + bytes), or end().
std::map<uintptr_t, size_t>::const_iterator reservation_of(uintptr_t address, size_t bytes) {
  const auto& reservations = vmm().reservations;
  auto after = reservations.upper_bound(address);
  if (after == reservations.begin()) return reservations.end();
  auto candidate = std::prev(after);
  if (address + bytes > candidate->first + candidate->second) return reservations.end();
  return candidate;
}

// The mapping holding `address`, or end().
std::map<uintptr_t, Mapping>::const_iterator mapping_of(uintptr_t address) {
  const auto& mappings = vmm().mappings;
  auto after = mappings.upper_bound(address);
  if (after == mappings.begin()) return mappings.end();
  auto candidate = std::prev(after);
  if (address >= candidate->first + candidate->second.bytes) return mappings.end();
  return candidate;
}

void free_physical(CUmemGenericAllocationHandle handle) {
  Physical& physical = vmm().physical[handle];
  close(physical.fd);
  give_back_device_capacity(physical.bytes);
  vmm().physical.erase(handle);
}

bool aligned(uintptr_t value) { return value % granularity() == 0; }

// ZT_EMU_VMM_FAIL=CALL:N (e.g. cuMemSetAccess:2): the Nth call of CALL counted from the first call
// that saw this value fails with CUDA_ERROR_OUT_OF_MEMORY, so that tests reach the backend's
// clean-up paths. Read at every call (these calls are few), so a test may set it in-process.
bool injected_failure(const char* call) {
  static std::string seen;
  static long calls = 0;
  const char* value = std::getenv("ZT_EMU_VMM_FAIL");
  if (value == nullptr) {
    seen.clear();
    return false;
  }
  if (seen != value) {
    seen = value;
    calls = 0;
  }
  const char* colon = std::strchr(value, ':');
  if (colon == nullptr || std::string(value, colon) != call) return false;
  return ++calls == std::strtol(colon + 1, nullptr, 10);
}

// Every entry point that changes the address space or the physical memory starts here: it is
// counted (ZT_EMU_CALL_REPORT, emu_counters.cpp) and may be made to fail (ZT_EMU_VMM_FAIL).
// True: the call must fail now.
bool enter(const char* call) {
  count_call("vmm", call);
  return injected_failure(call);
}

CUresult injected(const char* call) {
  return driver_fail(CUDA_ERROR_OUT_OF_MEMORY, std::string(call) + ": failure injected by ZT_EMU_VMM_FAIL");
}

}  // namespace

bool in_reserved_range(const void* pointer) {
  Guard lock(device_lock());
  return reservation_of(reinterpret_cast<uintptr_t>(pointer), 0) != vmm().reservations.end();
}

bool mapped_run(const void* pointer, uintptr_t* base, size_t* bytes) {
  Guard lock(device_lock());
  auto mapping = mapping_of(reinterpret_cast<uintptr_t>(pointer));
  if (mapping == vmm().mappings.end() || !mapping->second.accessible) return false;
  // Grow the run over adjacent accessible mappings both ways (ops may span chunks).
  uintptr_t begin = mapping->first, end = mapping->first + mapping->second.bytes;
  for (auto before = mapping; before != vmm().mappings.begin();) {
    --before;
    if (before->first + before->second.bytes != begin || !before->second.accessible) break;
    begin = before->first;
  }
  for (auto after = std::next(mapping); after != vmm().mappings.end(); ++after) {
    if (after->first != end || !after->second.accessible) break;
    end += after->second.bytes;
  }
  *base = begin;
  *bytes = end - begin;
  return true;
}

int mapped_device(const void* pointer) {
  Guard lock(device_lock());
  auto mapping = mapping_of(reinterpret_cast<uintptr_t>(pointer));
  if (mapping == vmm().mappings.end()) return -1;
  return vmm().physical[mapping->second.handle].device;
}

}  // namespace zt_emu

using zt_emu::driver_fail;
using zt_emu::vmm;

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  (void)option;
  if (granularity == nullptr || prop == nullptr)
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemGetAllocationGranularity: a null argument");
  *granularity = zt_emu::granularity();
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemAddressReserve")) return zt_emu::injected("cuMemAddressReserve");
  (void)addr;
  (void)flags;
  if (ptr == nullptr || size == 0 || !zt_emu::aligned(size) || (alignment && !zt_emu::aligned(alignment)))
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve: size " + std::to_string(size) +
                                                     " is not a positive multiple of the granularity");
  // Over-reserve so the base can be aligned to the granularity (mmap aligns to pages only).
  const size_t extra = zt_emu::granularity();
  void* raw = mmap(nullptr, size + extra, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return driver_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve: no address space");
  const uintptr_t base = (reinterpret_cast<uintptr_t>(raw) + extra - 1) / extra * extra;
  const size_t head = base - reinterpret_cast<uintptr_t>(raw);
  if (head) munmap(raw, head);
  if (extra - head) munmap(reinterpret_cast<void*>(base + size), extra - head);
  vmm().reservations[base] = size;
  *ptr = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemAddressFree")) return zt_emu::injected("cuMemAddressFree");
  auto found = vmm().reservations.find(static_cast<uintptr_t>(ptr));
  if (found == vmm().reservations.end() || found->second != size)
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree: not a reservation of " + std::to_string(size) +
                                                     " bytes");
  auto mapping = vmm().mappings.lower_bound(found->first);
  if (mapping != vmm().mappings.end() && mapping->first < found->first + size)
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree: the range still has mappings (cuMemUnmap first)");
  munmap(reinterpret_cast<void*>(found->first), size);
  vmm().reservations.erase(found);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemCreate")) return zt_emu::injected("cuMemCreate");
  (void)flags;
  if (handle == nullptr || prop == nullptr || size == 0 || !zt_emu::aligned(size))
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemCreate: size " + std::to_string(size) +
                                                     " is not a positive multiple of the granularity");
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->location.id < 0 || prop->location.id >= devices)
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemCreate: only pinned device memory of an existing device");
  std::string problem;
  if (!zt_emu::claim_device_capacity(size, &problem)) return driver_fail(CUDA_ERROR_OUT_OF_MEMORY, problem);
  const int fd = memfd_create("zt-emu-physical", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    zt_emu::give_back_device_capacity(size);
    return driver_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: memfd of " + std::to_string(size) + " bytes failed");
  }
  // New physical memory reads NaN (0xFF bytes), like a new cudaMalloc.
  void* fill = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fill != MAP_FAILED) {
    std::memset(fill, 0xFF, size);
    munmap(fill, size);
  }
  const CUmemGenericAllocationHandle id = vmm().next_handle++;
  vmm().physical[id] = zt_emu::Physical{fd, size, prop->location.id, 0, false};
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemRelease")) return zt_emu::injected("cuMemRelease");
  auto found = vmm().physical.find(handle);
  if (found == vmm().physical.end() || found->second.released)
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemRelease: not a live handle");
  found->second.released = true;
  if (found->second.mappings == 0) zt_emu::free_physical(handle);  // else at the last cuMemUnmap
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemMap")) return zt_emu::injected("cuMemMap");
  (void)flags;
  const uintptr_t address = static_cast<uintptr_t>(ptr);
  auto physical = vmm().physical.find(handle);
  if (physical == vmm().physical.end() || physical->second.released)
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemMap: not a live handle");
  if (!zt_emu::aligned(address) || !zt_emu::aligned(size) || offset + size > physical->second.bytes ||
      zt_emu::reservation_of(address, size) == vmm().reservations.end())
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemMap: the range is not granularity-aligned inside a reservation "
                                                 "or runs past the physical memory");
  auto next = vmm().mappings.lower_bound(address);
  if ((next != vmm().mappings.end() && next->first < address + size) ||
      zt_emu::mapping_of(address) != vmm().mappings.end())
    return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemMap: the range is mapped already");
  void* mapped = mmap(reinterpret_cast<void*>(address), size, PROT_NONE, MAP_SHARED | MAP_FIXED, physical->second.fd,
                      static_cast<off_t>(offset));
  if (mapped == MAP_FAILED) return driver_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemMap: mmap failed");
  vmm().mappings[address] = zt_emu::Mapping{size, handle, false};
  ++physical->second.mappings;
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemSetAccess")) return zt_emu::injected("cuMemSetAccess");
  const uintptr_t address = static_cast<uintptr_t>(ptr);
  if (desc == nullptr || count == 0) return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: no descriptor");
  const bool read_write = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (uintptr_t at = address; at < address + size;) {
    auto mapping = vmm().mappings.find(at);
    if (mapping == vmm().mappings.end())
      return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: the range is not mapped by whole mappings");
    mapping->second.accessible = read_write;
    at += mapping->second.bytes;
  }
  mprotect(reinterpret_cast<void*>(address), size, read_write ? PROT_READ | PROT_WRITE : PROT_NONE);
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  zt_emu::Guard lock(zt_emu::device_lock());
  if (zt_emu::enter("cuMemUnmap")) return zt_emu::injected("cuMemUnmap");
  const uintptr_t address = static_cast<uintptr_t>(ptr);
  for (uintptr_t at = address; at < address + size;) {
    auto mapping = vmm().mappings.find(at);
    if (mapping == vmm().mappings.end())
      return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: the range is not whole mappings");
    at += mapping->second.bytes;
  }
  for (uintptr_t at = address; at < address + size;) {
    auto mapping = vmm().mappings.find(at);
    const size_t bytes = mapping->second.bytes;
    zt_emu::Physical& physical = vmm().physical[mapping->second.handle];
    mmap(reinterpret_cast<void*>(at), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (--physical.mappings == 0 && physical.released) zt_emu::free_physical(mapping->second.handle);
    vmm().mappings.erase(mapping);
    at += bytes;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const std::string success = "no error";
  *text = error == CUDA_SUCCESS ? success.c_str() : zt_emu::last_driver_error().c_str();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (device == nullptr || ordinal < 0 || ordinal >= devices)
    return driver_fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet: no device " + std::to_string(ordinal));
  *device = ordinal;
  return CUDA_SUCCESS;
}

// Only what the backend asks: the emulated device supports virtual memory management.
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  (void)device;
  if (value == nullptr) return driver_fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: value is null");
  if (attribute != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    return driver_fail(CUDA_ERROR_NOT_SUPPORTED, "cuDeviceGetAttribute: attribute " +
                                                     std::to_string(static_cast<int>(attribute)) + " is not emulated");
  *value = 1;
  return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  (void)cudaVersion;
  (void)flags;
  struct Entry {
    const char* name;
    void* function;
  };
  static const Entry entries[] = {
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString)},
      {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
  };
  if (symbol == nullptr || funcPtr == nullptr) return cudaErrorInvalidValue;
  for (const Entry& entry : entries) {
    if (std::strcmp(entry.name, symbol) == 0) {
      *funcPtr = entry.function;
      if (driverStatus) *driverStatus = cudaDriverEntryPointSuccess;
      return cudaSuccess;
    }
  }
  *funcPtr = nullptr;
  if (driverStatus) *driverStatus = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

}  // extern "C"
