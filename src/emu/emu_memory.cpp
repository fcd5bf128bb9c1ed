// The emulated device's memory: the device-memory arena (cudaMalloc / cudaFree), pinned host
// memory (cudaHostAlloc / cudaMallocHost), and the classification of any pointer as device,
// pinned, freed-device, pageable or null memory, which the kernel, copy, cuBLASLt and NCCL
// operand checks use.
//
// The arena is one mmap(MAP_NORESERVE) reservation per process: pages cost memory only once
// touched, so its capacity (ZT_EMU_DEVICE_MEMORY, default 4GiB) may exceed the machine's free
// memory as long as the program does not really use it, as a GPU's memory need not fit in the
// host's. All emulated devices of a process share it (each process is one rank, and a rank
// drives one device; cudaMemGetInfo reports the shared use). Allocations are 256-byte aligned
// and surrounded by red zones that are never handed out, so a kernel that runs past its buffer
// touches no other buffer: AddressSanitizer reports it (ZT_EMU_ASAN builds poison the red zones
// and freed ranges), and a kernel pointer argument into them is classified FreedDevice.
// New allocations are filled with 0xFF bytes (NaN in fp32, bf16 and fp16), so a kernel that reads
// memory nobody wrote computes NaN instead of a lucky zero; freed memory is filled with 0xFE
// bytes (also NaN), so a use after cudaFree reads garbage, as it may on a GPU; and freed memory
// is not handed out again at once (a quarantine), so such a use is seen as one.
//
// This file is not compiled with a sanitizer (its bookkeeping is not the program's); it only
// annotates the arena for AddressSanitizer in ZT_EMU_ASAN builds.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <mutex>
#include <string>

#include "emu/emu_internal.h"
#include "emu/emu_runtime_memory.h"

#if ZT_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace zt_emu {

namespace {

// ---- AddressSanitizer annotations ------------------------------------------------------------

// The emulator itself is not instrumented, but its memset and memcpy go through ASan's
// interceptors, which check the shadow: so a range is unpoisoned before the emulator writes
// its poison bytes into it, and poisoned again after.
void asan_poison(const void* pointer, size_t bytes) {
#if ZT_EMU_ASAN
  __asan_poison_memory_region(pointer, bytes);
#else
  (void)pointer;
  (void)bytes;
#endif
}

void asan_unpoison(const void* pointer, size_t bytes) {
#if ZT_EMU_ASAN
  __asan_unpoison_memory_region(pointer, bytes);
#else
  (void)pointer;
  (void)bytes;
#endif
}

// ---- helpers -----------------------------------------------------------------------------------

constexpr unsigned char kFreshByte = 0xFF;  // a new allocation: NaN in every float format
constexpr unsigned char kFreedByte = 0xFE;  // freed: NaN too, and distinguishable in a dump
constexpr size_t kPageBytes = 4096;

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

uintptr_t address(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

std::string size_text(size_t bytes) { return std::to_string(bytes) + " bytes"; }

// ---- the arena -----------------------------------------------------------------------------

struct DeviceAllocation {
  size_t bytes;    // as requested
  size_t rounded;  // bytes rounded up to kDeviceAlignment: what counts against the capacity
  int device;
};

class Arena {
 public:
  Arena() : capacity_(env_bytes("ZT_EMU_DEVICE_MEMORY", size_t{4} << 30)) {
    if (capacity_ < kDeviceAlignment) {
      std::fprintf(stderr, "zerotune emulated device: ZT_EMU_DEVICE_MEMORY=%zu bytes is too small for "
                           "a device (at least %zu bytes)\n", capacity_, kDeviceAlignment);
      std::abort();
    }
    // Red zones are not counted against the capacity (a GPU has no red zones): many small
    // allocations need up to three times the counted size (256 counted + 2 x 256 red zone), so
    // the reservation is that large. MAP_NORESERVE: untouched pages cost nothing.
    reserved_ = round_up(3 * capacity_ + 2 * kRedZoneBytes, kPageBytes);
    void* base = mmap(nullptr, reserved_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      std::fprintf(stderr, "zerotune emulated device: cannot reserve %zu bytes of address space for the device "
                           "memory (ZT_EMU_DEVICE_MEMORY=%zu bytes); lower ZT_EMU_DEVICE_MEMORY\n", reserved_,
                   capacity_);
      std::abort();
    }
    base_ = static_cast<std::byte*>(base);
    free_ranges_[0] = reserved_;
  }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }

  // Physical chunks of the virtual memory subset count against the capacity too.
  bool claim(size_t bytes, std::string* problem) {
    if (bytes > capacity_ - used_) {
      *problem = "out of memory: cannot create " + size_text(bytes) + " of physical memory on the emulated "
                 "device: " + size_text(used_) + " of its " + size_text(capacity_) + " are in use (ZT_EMU_DEVICE_MEMORY)";
      return false;
    }
    add_used(bytes);
    return true;
  }
  void give_back_claim(size_t bytes) { used_ -= bytes; }

  bool contains(const void* pointer) const {
    return address(pointer) >= address(base_) && address(pointer) < address(base_) + reserved_;
  }

  void* allocate(size_t bytes, int device, std::string* problem) {
    const size_t rounded = round_up(bytes, kDeviceAlignment);
    if (rounded > capacity_ - used_) {
      *problem = "out of memory: cannot allocate " + size_text(bytes) + " on the emulated device: " +
                 size_text(used_) + " of its " + size_text(capacity_) + " are in use (ZT_EMU_DEVICE_MEMORY)";
      return nullptr;
    }
    const size_t block = kRedZoneBytes + rounded + kRedZoneBytes;
    auto range = first_range_of(block);
    if (range == free_ranges_.end()) {
      end_quarantine(0);
      range = first_range_of(block);
    }
    if (range == free_ranges_.end()) {
      *problem = "out of memory: no contiguous range of " + size_text(bytes) + " is left in the emulated "
                 "device's fragmented memory (" + size_text(used_) + " of " + size_text(capacity_) + " in use)";
      return nullptr;
    }
    const size_t offset = range->first;
    take(range, block);
    std::byte* data = base_ + offset + kRedZoneBytes;
    asan_unpoison(base_ + offset, block);
    std::memset(data, kFreshByte, rounded);
    asan_poison(base_ + offset, block);
    asan_unpoison(data, bytes);  // exact: a read of the 256-byte rounding's tail is reported too
    live_[address(data)] = DeviceAllocation{bytes, rounded, device};
    add_used(rounded);
    return data;
  }

  bool release(void* pointer) {
    const auto found = live_.find(address(pointer));
    if (found == live_.end()) return false;
    const DeviceAllocation allocation = found->second;
    live_.erase(found);
    std::byte* data = static_cast<std::byte*>(pointer);
    asan_unpoison(data, allocation.rounded);
    std::memset(data, kFreedByte, allocation.rounded);
    asan_poison(data, allocation.rounded);
    used_ -= allocation.rounded;
    const size_t block = kRedZoneBytes + allocation.rounded + kRedZoneBytes;
    quarantine_.push_back({static_cast<size_t>(data - base_) - kRedZoneBytes, block});
    quarantined_ += block;
    end_quarantine(quarantine_limit());
    return true;
  }

  // The live allocation whose [base, base + bytes] holds `pointer` (one past the end included:
  // the end pointer of a buffer is a legal argument); nullptr when none.
  const std::pair<const uintptr_t, DeviceAllocation>* live_allocation(const void* pointer) const {
    auto after = live_.upper_bound(address(pointer));
    if (after == live_.begin()) return nullptr;
    const auto& candidate = *std::prev(after);
    if (address(pointer) > candidate.first + candidate.second.bytes) return nullptr;
    return &candidate;
  }

 private:
  void add_used(size_t bytes) {
    used_ += bytes;
    peak_ = std::max(peak_, used_);
  }

  // First fit, lowest address first: the arena's touched pages stay near its start, so the
  // memory really used stays close to the program's peak.
  std::map<size_t, size_t>::iterator first_range_of(size_t bytes) {
    for (auto range = free_ranges_.begin(); range != free_ranges_.end(); ++range)
      if (range->second >= bytes) return range;
    return free_ranges_.end();
  }

  void take(std::map<size_t, size_t>::iterator range, size_t bytes) {
    const size_t offset = range->first, length = range->second;
    free_ranges_.erase(range);
    if (length > bytes) free_ranges_[offset + bytes] = length - bytes;
  }

  // Freed blocks wait in a quarantine before they are handed out again, so that a use shortly
  // after cudaFree still finds freed memory (FreedDevice, poisoned for ASan) rather than a new
  // buffer that hides the bug. Its pages stay touched: it is bounded to 1/8 of the capacity and
  // 256 MiB, and emptied when an allocation finds no room.
  size_t quarantine_limit() const { return std::min(capacity_ / 8, size_t{256} << 20); }

  // Returns the oldest quarantined blocks to the free ranges until at most `limit` bytes wait.
  void end_quarantine(size_t limit) {
    while (quarantined_ > limit && !quarantine_.empty()) {
      const auto [offset, length] = quarantine_.front();
      quarantine_.pop_front();
      quarantined_ -= length;
      give_back(offset, length);
    }
  }

  // Returns [offset, offset + length) to the free ranges, merged with its neighbours.
  void give_back(size_t offset, size_t length) {
    auto next = free_ranges_.lower_bound(offset);
    if (next != free_ranges_.end() && offset + length == next->first) {
      length += next->second;
      next = free_ranges_.erase(next);
    }
    if (next != free_ranges_.begin()) {
      auto previous = std::prev(next);
      if (previous->first + previous->second == offset) {
        previous->second += length;
        return;
      }
    }
    free_ranges_[offset] = length;
  }

  size_t capacity_;
  size_t reserved_ = 0;
  std::byte* base_ = nullptr;
  size_t used_ = 0;
  size_t peak_ = 0;
  std::map<uintptr_t, DeviceAllocation> live_;  // by base address
  std::map<size_t, size_t> free_ranges_;        // offset -> length, merged
  std::deque<std::pair<size_t, size_t>> quarantine_;  // freed blocks (offset, length), oldest first
  size_t quarantined_ = 0;
};

// Never destroyed: static destructors of the program (a backend's allocator) may still free
// device memory at exit, after this file's statics would have been destroyed.
// ZT_EMU_MEMORY_REPORT=PATH: at exit, the process writes {"peak_bytes", "used_bytes",
// "capacity_bytes"} of its device memory to PATH.RANK (the MPI rank from the launcher's
// environment, else the pid), so that tests can compare the true high-water mark of a run with
// what the program predicted (a GPU has no such counter; the emulator's arena does).
void write_memory_report();

Arena& arena() {
  static Arena* const instance = [] {
    Arena* made = new Arena();
    if (std::getenv("ZT_EMU_MEMORY_REPORT")) std::atexit(write_memory_report);
    return made;
  }();
  return *instance;
}

void write_memory_report() {
  const std::string path = report_path("ZT_EMU_MEMORY_REPORT");
  if (std::FILE* file = std::fopen(path.c_str(), "w")) {
    std::fprintf(file, "{\"peak_bytes\": %zu, \"used_bytes\": %zu, \"capacity_bytes\": %zu}\n", arena().peak(),
                 arena().used(), arena().capacity());
    std::fclose(file);
  }
}

// ---- pinned host memory ----------------------------------------------------------------------

// Live pinned allocations: base -> requested bytes.
std::map<uintptr_t, size_t>& pinned_allocations() {
  static auto* const instance = new std::map<uintptr_t, size_t>();
  return *instance;
}

// The bases of live pinned allocations made with cudaHostAllocMapped: kernels may read them.
std::set<uintptr_t>& mapped_pinned_bases() {
  static auto* const instance = new std::set<uintptr_t>();
  return *instance;
}

// The live pinned allocation holding `pointer` (one past the end included); nullptr when none.
// A pointer that is both one past the end of one allocation and the base of the next belongs
// to the next (upper_bound finds it first).
const std::pair<const uintptr_t, size_t>* pinned_allocation(const void* pointer) {
  const auto& allocations = pinned_allocations();
  auto after = allocations.upper_bound(address(pointer));
  if (after == allocations.begin()) return nullptr;
  const auto& candidate = *std::prev(after);
  if (address(pointer) > candidate.first + candidate.second) return nullptr;
  return &candidate;
}

// Why `bytes` at `pointer` do not fit in the allocation [base, base + size), or empty.
std::string range_problem(const void* pointer, size_t bytes, uintptr_t base, size_t size, Memory memory,
                          const std::string& what) {
  const size_t offset = address(pointer) - base;
  if (bytes <= size - offset) return "";
  return what + " (" + pointer_text(pointer) + "): " + size_text(bytes) + " at offset " + std::to_string(offset) +
         " run past the end of its " + memory_name(memory) + " allocation of " + size_text(size);
}

}  // namespace

// ---- emu_runtime_memory.h ------------------------------------------------------------------------

std::string pointer_text(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

void* allocate_device(size_t bytes, int device, std::string* problem) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  return arena().allocate(bytes, device, problem);
}

bool release_device(void* pointer) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  return arena().release(pointer);
}

int allocation_device(const void* pointer) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const auto* allocation = arena().live_allocation(pointer);
  if (allocation) return allocation->second.device;
  return mapped_device(pointer);
}

void* allocate_pinned(size_t bytes, bool mapped) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const size_t rounded = round_up(bytes == 0 ? 1 : bytes, kPageBytes);  // aligned_alloc wants a multiple
  void* pointer = std::aligned_alloc(kPageBytes, rounded);
  if (pointer == nullptr) return nullptr;
  std::memset(pointer, kFreshByte, rounded);
  // The tail up to the page is not the caller's: ASan reports a read or write there.
  asan_poison(static_cast<std::byte*>(pointer) + bytes, rounded - bytes);
  pinned_allocations()[address(pointer)] = bytes;
  if (mapped) mapped_pinned_bases().insert(address(pointer));
  return pointer;
}

bool release_pinned(void* pointer) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  auto& allocations = pinned_allocations();
  const auto found = allocations.find(address(pointer));
  if (found == allocations.end()) return false;
  const size_t rounded = round_up(found->second == 0 ? 1 : found->second, kPageBytes);
  allocations.erase(found);
  mapped_pinned_bases().erase(address(pointer));
  asan_unpoison(pointer, rounded);  // the heap's own poisoning takes over at free
  std::free(pointer);
  return true;
}

size_t device_capacity() {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  return arena().capacity();
}

size_t device_used() {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  return arena().used();
}

size_t device_peak() {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  return arena().peak();
}

bool claim_device_capacity(size_t bytes, std::string* problem) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  return arena().claim(bytes, problem);
}

void give_back_device_capacity(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  arena().give_back_claim(bytes);
}

std::string device_access_problem(const void* pointer, size_t bytes, const std::string& what) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const Memory memory = classify(pointer);
  switch (memory) {
    case Memory::Device: {
      uintptr_t base = 0;
      size_t size = 0;
      if (mapped_run(pointer, &base, &size)) return range_problem(pointer, bytes, base, size, memory, what);
      const auto* allocation = arena().live_allocation(pointer);
      return range_problem(pointer, bytes, allocation->first, allocation->second.bytes, memory, what);
    }
    case Memory::Pinned: {
      const auto* allocation = pinned_allocation(pointer);
      return range_problem(pointer, bytes, allocation->first, allocation->second, memory, what);
    }
    case Memory::Null: return what + " is a null pointer";
    case Memory::FreedDevice:
      if (in_reserved_range(pointer))
        return what + " (" + pointer_text(pointer) + ") points to reserved virtual memory with no physical memory "
               "mapped (or no access granted): a use after cuMemUnmap, or before cuMemMap and cuMemSetAccess";
      return what + " (" + pointer_text(pointer) + ") points to freed device memory (or a red zone between "
             "allocations): a use after cudaFree, or an address outside its allocation";
    case Memory::Pageable:
      return what + " (" + pointer_text(pointer) + ") points to pageable host memory: a GPU cannot dereference "
             "it; allocate it with cudaMalloc or cudaHostAlloc";
  }
  return "";
}

// ---- emu_internal.h ------------------------------------------------------------------------------

Memory classify(const void* pointer) {
  if (pointer == nullptr) return Memory::Null;
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const Arena& device_memory = arena();
  if (device_memory.contains(pointer))
    return device_memory.live_allocation(pointer) ? Memory::Device : Memory::FreedDevice;
  if (in_reserved_range(pointer)) {
    uintptr_t base = 0;
    size_t size = 0;
    return mapped_run(pointer, &base, &size) ? Memory::Device : Memory::FreedDevice;
  }
  return pinned_allocation(pointer) ? Memory::Pinned : Memory::Pageable;
}

const char* memory_name(Memory memory) {
  switch (memory) {
    case Memory::Null: return "a null pointer";
    case Memory::Device: return "device memory";
    case Memory::Pinned: return "pinned host memory";
    case Memory::FreedDevice: return "freed device memory";
    case Memory::Pageable: return "pageable host memory";
  }
  return "unknown memory";
}

void check_device_accessible(const void* pointer, size_t bytes, const std::string& what) {
  std::string problem = device_access_problem(pointer, bytes, what);
  if (!problem.empty()) device_fault(std::move(problem));
}

void check_kernel_operand(const void* pointer, size_t bytes, const std::string& what) {
  check_device_accessible(pointer, bytes, what);
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  const auto* pinned = pointer == nullptr ? nullptr : pinned_allocation(pointer);
  if (pinned == nullptr || mapped_pinned_bases().count(pinned->first)) return;
  device_fault(what + " (" + pointer_text(pointer) + ") points to pinned host memory that was not allocated with "
               "cudaHostAllocMapped: a GPU would read it across the bus at every access, while the host may be "
               "rewriting it; copy it to device memory first (cudaMemcpyAsync), or allocate it with "
               "cudaHostAlloc(..., cudaHostAllocMapped) if the device is meant to read host memory");
}

bool find_allocation(const void* pointer, const void** base, size_t* bytes) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  if (const auto* device = arena().contains(pointer) ? arena().live_allocation(pointer) : nullptr) {
    *base = reinterpret_cast<const void*>(device->first);
    *bytes = device->second.bytes;
    return true;
  }
  uintptr_t run_base = 0;
  size_t run_bytes = 0;
  if (mapped_run(pointer, &run_base, &run_bytes)) {
    *base = reinterpret_cast<const void*>(run_base);
    *bytes = run_bytes;
    return true;
  }
  if (const auto* pinned = pinned_allocation(pointer)) {
    *base = reinterpret_cast<const void*>(pinned->first);
    *bytes = pinned->second;
    return true;
  }
  return false;
}

}  // namespace zt_emu
