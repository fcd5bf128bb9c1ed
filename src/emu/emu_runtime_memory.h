// What emu_runtime.cpp needs from emu_memory.cpp beyond emu_internal.h: allocating and
// releasing device and pinned memory, the arena's capacity and use, and the operand checks of
// copies and memsets, which report a bad operand as the call's error instead of a fault.
// Private to those two files and their test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zt_emu {

// The size cudaMalloc counts against the capacity and hands out: a multiple of 256 bytes, as
// the CUDA allocator's alignment guarantee.
constexpr size_t kDeviceAlignment = 256;
// Bytes never handed out before and after each device allocation (poisoned for ASan).
constexpr size_t kRedZoneBytes = 256;

// A new device allocation of `bytes` (> 0) for `device`, poisoned with 0xFF bytes; nullptr when
// the capacity (or the arena's address space) is exhausted, with the reason in `problem`.
void* allocate_device(size_t bytes, int device, std::string* problem);
// Releases the allocation based at `pointer` (poisoned with 0xFE bytes); false when `pointer`
// is not the base of a live device allocation.
bool release_device(void* pointer);
// The device a live device allocation was made on (cudaPointerGetAttributes), -1 if none.
int allocation_device(const void* pointer);

// Pinned (page-locked) host memory: a registered 4096-aligned heap block of `bytes` (0 allowed),
// poisoned with 0xFF bytes; nullptr when the heap refuses. `mapped`: cudaHostAllocMapped was asked
// for (kernels may take it as an operand, check_kernel_operand). Release: false when `pointer`
// is not the base of a live pinned allocation.
void* allocate_pinned(size_t bytes, bool mapped);
bool release_pinned(void* pointer);

size_t device_capacity();  // ZT_EMU_DEVICE_MEMORY, read once
size_t device_used();      // the live allocations' 256-aligned sizes + the virtual-memory chunks
size_t device_peak();      // the highest device_used() so far

// Physical memory of the virtual memory management subset (emu_vmm.cpp: cuMemCreate) counts
// against the same capacity as cudaMalloc: claim returns false (and why, in `problem`) when
// `bytes` do not fit; give_back returns them.
bool claim_device_capacity(size_t bytes, std::string* problem);
void give_back_device_capacity(size_t bytes);

// Virtual memory (emu_vmm.cpp): whether `pointer` lies in a cuMemAddressReserve range, and the
// mapped, accessible run of chunks around it ([*base, *base + *bytes), false when the chunk
// holding `pointer` is not mapped or has no access: then reading it is a fault).
bool in_reserved_range(const void* pointer);
bool mapped_run(const void* pointer, uintptr_t* base, size_t* bytes);
int mapped_device(const void* pointer);  // the device of the mapped chunk at `pointer`, -1 if none

// Empty when `bytes` at `pointer` lie inside one live device or pinned allocation, else why
// not, naming `what` (the check_device_accessible rule, as a message rather than a fault).
std::string device_access_problem(const void* pointer, size_t bytes, const std::string& what);

// "0x7f...": pointers in messages.
std::string pointer_text(const void* pointer);

}  // namespace zt_emu
