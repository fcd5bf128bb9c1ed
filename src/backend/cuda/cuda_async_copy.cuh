// Copies from global to shared memory that bypass the registers (PTX cp.async, sm_80 and
// later): a thread issues 16-byte copies, commits them as a group, and later waits for its
// groups; the block then meets at a barrier before reading what other threads copied. Double
// buffering this way costs no registers (a copy staged through registers holds a whole tile's
// share per thread). Inline PTX under nvcc; on the emulated device the copies are done at the
// wait, the latest moment a GPU may do them (emu/emu_device.h).
//   zt::cuda::async_copy_16(shared_target, global_source);
//   zt::cuda::async_copy_commit();
//   zt::cuda::async_copy_wait<0>();  // all of this thread's groups done
#pragma once
#include <cstdint>
#include <source_location>

namespace zt::cuda {

#if defined(ZT_CUDA_EMULATE)
inline void async_copy_16(void* target, const void* source,
                          const std::source_location where = std::source_location::current()) {
  ::zt_emu::async_copy_16(target, source, where.file_name(), static_cast<int>(where.line()));
}
inline void async_copy_commit() { ::zt_emu::async_copy_commit(); }
template <int kPendingGroups>
void async_copy_wait() {
  ::zt_emu::async_copy_wait(kPendingGroups);
}
#else
// .cg: cached in L2 only (each tile is read once per block). The source in the .global space,
// as the instruction names it (a generic address of global memory is the same number today).
__device__ inline void async_copy_16(void* target, const void* source) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(target));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(__cvta_generic_to_global(source))
               : "memory");
}
__device__ inline void async_copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPendingGroups>
__device__ inline void async_copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPendingGroups) : "memory");
}
#endif

}  // namespace zt::cuda
