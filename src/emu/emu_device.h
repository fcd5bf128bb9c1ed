// What a kernel sees on the emulated device: the built-in indices, barriers, warp operations
// (shuffles, ballot, vote), atomics, the device math intrinsics the kernels call, shared memory,
// and the launch that queues a grid on a stream. The CUDA sources include it through
// emu/emu_predefine.h (force-included when they are compiled as host C++); kernels themselves
// are unchanged: they launch through zt::cuda::launch and declare shared memory with
// ZT_SHARED / ZT_DYNAMIC_SHARED (backend/cuda/cuda_launch.h), which mean the CUDA spelling
// under nvcc.
//
// Each thread of a block runs as a fiber; a barrier or a warp operation suspends it until its
// partners arrive, and the schedule (ZT_EMU_SCHEDULE) decides who runs next. Everything a GPU
// would reject at run time (a divergent barrier, a lane outside a shuffle's mask, a thread that
// exits while others wait at a barrier, a kernel argument pointing to pageable or freed memory)
// stops the grid with a message naming every thread's file:line (see emu_device.cpp).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace zt_emu {

class Block;

// The emulated thread that is running (set by the scheduler before it resumes a fiber).
struct ThreadContext {
  uint3 thread_idx{};
  uint3 block_idx{};
  dim3 block_dim{};
  dim3 grid_dim{};
  Block* block = nullptr;
  int linear = 0;  // threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y
};
extern thread_local ThreadContext* current_thread;
[[noreturn]] void used_outside_a_kernel();
// The running thread; a clear abort when called outside a kernel. Inline: kernels read
// threadIdx and blockDim in their inner loops.
inline ThreadContext& this_thread() {
  if (current_thread == nullptr) [[unlikely]] used_outside_a_kernel();
  return *current_thread;
}

// ---- barriers and warp operations (emu_device.cpp) --------------------------------------------

void sync_threads(const char* file, int line);
void sync_warp(const char* file, int line, unsigned mask = 0xFFFFFFFFu);

enum class WarpOpKind { Shuffle, Ballot, Any, All, SyncWarp, Gather };
// The operations after which a lane sees what the others wrote before them (a __syncwarp, and
// a gather, whose lanes read each other's fragments).
inline bool orders_memory(WarpOpKind kind) {
  return kind == WarpOpKind::SyncWarp || kind == WarpOpKind::Gather;
}
// One warp-synchronous operation of the calling lane: waits until every lane of `mask` has
// called the same operation, then returns this lane's result: for Shuffle the 64-bit value of
// lane `source_lane` (which must be in `mask`), for Ballot/Any/All the vote over `value != 0`.
uint64_t warp_operation(WarpOpKind kind, const char* name, unsigned mask, uint64_t value,
                        int source_lane, const char* file, int line);
// Every lane of the warp gives `bytes` (at most kExchangeBytes) of operands (all 32 must take
// part, as in an mma or ldmatrix); returns the 32 lanes' operands, lane l's at
// l * kExchangeBytes (16-byte aligned), valid until the warp's next exchange completes. The
// exchanges alternate between two buffers per warp: a lane writes its next operands into the
// other one, and nobody can write this one again before every lane has arrived at the next
// exchange (so has read this one), so no trailing __syncwarp is needed.
constexpr size_t kExchangeBytes = 32;
const unsigned char* warp_exchange(const void* operands, size_t bytes, const char* name,
                                   const char* file, int line);
// Stops the grid: an instruction (mma, ldmatrix: emu_mma.h; cp.async) misused by the calling lane.
[[noreturn]] void instruction_fault(const char* op, const std::string& why, const char* file, int line);
// How many warp-wide mma.sync operations kernels have run in this process (tests use it to see
// that a kernel took its tensor-core path).
uint64_t mma_operations();
void count_mma_operation();
// ZT_EMU_MMA_ROUNDING: nearest (default) or toward-zero, how the emulated mma rounds each add
// (emu_mma.h).
bool mma_rounds_toward_zero();
// Shared-memory wavefronts of ldmatrix (emu_mma.h). A GPU serves a warp's shared-memory request
// in wavefronts, each reading one 4-byte word from each of the 32 banks (bank = byte offset / 4
// % 32); ldmatrix .x4 is 4 phases, one per 8 x 8 matrix (8 rows of 16 bytes), each one wavefront
// when its rows' words fall in distinct banks (or are the same word) and one more for every
// further distinct word a bank must serve (a bank conflict). Counted over the process, so tests
// can see that a kernel's padded tiles load conflict-free: the emulator's only view of shared
// memory speed (plain loads, stores and cp.async are not grouped by instruction, so not counted).
uint64_t ldmatrix_phases();
uint64_t ldmatrix_wavefronts();
void count_ldmatrix_wavefronts(uint64_t phases, uint64_t wavefronts);
// The wavefronts of one phase whose 8 rows of 16 bytes start at these shared-memory offsets.
int phase_wavefronts(const size_t (&row_offsets)[8]);

// ---- asynchronous copies (PTX cp.async, emu_device.cpp) -----------------------------------------
// cp.async.cg.shared.global [target], [source], 16 queues a 16-byte copy on the calling thread;
// commit closes the thread's open copies into a group; wait(n) completes all but the n most
// recent groups. A copy is done at the latest moment the PTX ISA allows (its group's wait), so a
// kernel that reads a destination before waiting for it (or, for another thread's copy, before
// the barrier after that thread's wait) reads the poison, as a GPU may; with
// ZT_EMU_ASYNC_COPIES=at-issue at the earliest (its issue), so a kernel that refills a buffer
// other threads still read changes what they read, as a GPU may. target must be 16-byte
// aligned shared memory, source 16-byte aligned memory outside it; a thread that exits with
// copies it never waited for is a fault.
void async_copy_16(void* target, const void* source, const char* file, int line);
// How many 16-byte cp.async copies kernels have issued in this process (the roofline's count).
uint64_t async_copies();
void async_copy_commit();
void async_copy_wait(int pending_groups);

// ---- shared memory (emu_device.cpp) ------------------------------------------------------------

// The block's dynamic shared memory (the launch's shared-memory bytes, poisoned with 0xFF).
void* dynamic_shared_memory();
// Whether [pointer, pointer + bytes) lies within the running block's shared memory (dynamic or
// static): ldmatrix (emu_mma.h) reads nothing else.
bool in_shared_memory(const void* pointer, size_t bytes);
// The byte offset of `pointer` within the running block's shared memory (from the dynamic shared
// memory's start, or the static array's holding it): its bank is offset / 4 % 32.
size_t shared_offset(const void* pointer);
// A static __shared__ array of the running block: one per (block, declaration); the first
// thread to reach the declaration allocates it (poisoned with 0xFF), the others get the same.
void* static_shared_memory(size_t bytes, size_t alignment, const void* declaration,
                           const char* name, const char* file, int line);

// ---- launches (emu_device.cpp) -----------------------------------------------------------------

// A kernel argument that is a pointer, checked when the grid runs (device or pinned memory).
struct PointerArgument {
  int index;
  const void* pointer;
};

struct LaunchSite {
  const char* file;
  unsigned line;
};

// Validates the configuration as the driver does (on failure: cudaGetLastError's error, nothing
// queued) and queues the grid on `stream`; `thread_body` runs one thread (it calls the kernel).
void launch_grid(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                 cudaStream_t stream, LaunchSite site, std::vector<PointerArgument> pointers,
                 std::function<void()> thread_body);

template <class Tuple, size_t... I>
std::vector<PointerArgument> pointer_arguments(const Tuple& arguments, std::index_sequence<I...>) {
  std::vector<PointerArgument> pointers;
  auto add = [&](int index, const auto& argument) {
    if constexpr (std::is_pointer_v<std::decay_t<decltype(argument)>>) {
      pointers.push_back({index, static_cast<const void*>(argument)});
    }
  };
  (add(static_cast<int>(I), std::get<I>(arguments)), ...);
  return pointers;
}

// kernel<<<grid, block, shared, stream>>>(args...): the arguments are converted to the
// kernel's parameter types and copied now (as a launch does); each thread gets its own copy.
template <class... Params, class... Args>
void launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
            LaunchSite site, void (*kernel)(Params...), Args&&... args) {
  using Arguments = std::tuple<std::decay_t<Params>...>;
  auto arguments = std::make_shared<Arguments>(static_cast<std::decay_t<Params>>(args)...);
  auto pointers = pointer_arguments(*arguments, std::index_sequence_for<Params...>{});
  launch_grid(reinterpret_cast<const void*>(kernel), grid, block, dynamic_shared_bytes, stream,
              site, std::move(pointers), [kernel, arguments] { std::apply(kernel, *arguments); });
}

// ---- 64-bit transport for shuffles -------------------------------------------------------------

template <class T>
uint64_t to_bits(T value) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// The source lane of each shuffle flavour, as the CUDA programming guide defines it for a
// `width`-lane segment; a source outside the caller's segment gives the caller's own value.
inline int lane_of_caller() { return this_thread().linear % 32; }

}  // namespace zt_emu

// ---- the built-ins -------------------------------------------------------------------------------

#define threadIdx (::zt_emu::this_thread().thread_idx)
#define blockIdx (::zt_emu::this_thread().block_idx)
#define blockDim (::zt_emu::this_thread().block_dim)
#define gridDim (::zt_emu::this_thread().grid_dim)
#define warpSize 32

#define __syncthreads() ::zt_emu::sync_threads(__FILE__, __LINE__)
#define __syncwarp(...) ::zt_emu::sync_warp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)

template <class T>
T zt_emu_shfl(const char* name, unsigned mask, T var, int source, const char* file, int line) {
  return ::zt_emu::from_bits<T>(::zt_emu::warp_operation(::zt_emu::WarpOpKind::Shuffle, name, mask,
                                                         ::zt_emu::to_bits(var), source, file, line));
}
template <class T>
T zt_emu_shfl_sync(unsigned mask, T var, int src_lane, int width, const char* file, int line) {
  const int lane = ::zt_emu::lane_of_caller(), segment = lane - lane % width;
  return zt_emu_shfl("__shfl_sync", mask, var, segment + src_lane % width, file, line);
}
template <class T>
T zt_emu_shfl_xor_sync(unsigned mask, T var, int lane_mask, int width, const char* file, int line) {
  const int lane = ::zt_emu::lane_of_caller(), segment_end = (lane / width + 1) * width;
  const int source = lane ^ lane_mask;
  return zt_emu_shfl("__shfl_xor_sync", mask, var, source < segment_end ? source : lane, file, line);
}
template <class T>
T zt_emu_shfl_up_sync(unsigned mask, T var, unsigned delta, int width, const char* file, int line) {
  const int lane = ::zt_emu::lane_of_caller(), segment = lane - lane % width;
  const int source = lane - static_cast<int>(delta);
  return zt_emu_shfl("__shfl_up_sync", mask, var, source >= segment ? source : lane, file, line);
}
template <class T>
T zt_emu_shfl_down_sync(unsigned mask, T var, unsigned delta, int width, const char* file, int line) {
  const int lane = ::zt_emu::lane_of_caller(), segment_end = (lane / width + 1) * width;
  const int source = lane + static_cast<int>(delta);
  return zt_emu_shfl("__shfl_down_sync", mask, var, source < segment_end ? source : lane, file, line);
}
#define ZT_EMU_WIDTH(width, ...) width
#define __shfl_sync(mask, var, lane, ...) \
  zt_emu_shfl_sync(mask, var, lane, ZT_EMU_WIDTH(__VA_ARGS__ __VA_OPT__(, ) 32), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, var, lane_mask, ...) \
  zt_emu_shfl_xor_sync(mask, var, lane_mask, ZT_EMU_WIDTH(__VA_ARGS__ __VA_OPT__(, ) 32), __FILE__, __LINE__)
#define __shfl_up_sync(mask, var, delta, ...) \
  zt_emu_shfl_up_sync(mask, var, delta, ZT_EMU_WIDTH(__VA_ARGS__ __VA_OPT__(, ) 32), __FILE__, __LINE__)
#define __shfl_down_sync(mask, var, delta, ...) \
  zt_emu_shfl_down_sync(mask, var, delta, ZT_EMU_WIDTH(__VA_ARGS__ __VA_OPT__(, ) 32), __FILE__, __LINE__)
#define __ballot_sync(mask, predicate)                                                    \
  static_cast<unsigned>(::zt_emu::warp_operation(::zt_emu::WarpOpKind::Ballot, "__ballot_sync", \
                                                 mask, (predicate) ? 1u : 0u, 0, __FILE__, __LINE__))
#define __any_sync(mask, predicate)                                                            \
  static_cast<int>(::zt_emu::warp_operation(::zt_emu::WarpOpKind::Any, "__any_sync", mask,     \
                                            (predicate) ? 1u : 0u, 0, __FILE__, __LINE__))
#define __all_sync(mask, predicate)                                                            \
  static_cast<int>(::zt_emu::warp_operation(::zt_emu::WarpOpKind::All, "__all_sync", mask,     \
                                            (predicate) ? 1u : 0u, 0, __FILE__, __LINE__))

// ---- atomics: real atomic instructions, so ThreadSanitizer sees them as atomic ----------------

template <class T>
T zt_emu_atomic_update(T* address, T (*update)(T, T), T operand) {
  std::atomic_ref<T> target(*address);
  T old = target.load();
  while (!target.compare_exchange_weak(old, update(old, operand))) {
  }
  return old;
}
template <class T>
T atomicAdd(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a + b); }, value);
}
template <class T>
T atomicSub(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a - b); }, value);
}
template <class T>
T atomicMin(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return b < a ? b : a; }, value);
}
template <class T>
T atomicMax(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return b > a ? b : a; }, value);
}
template <class T>
T atomicOr(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a | b); }, value);
}
template <class T>
T atomicAnd(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a & b); }, value);
}
template <class T>
T atomicXor(T* address, T value) {
  return zt_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a ^ b); }, value);
}
template <class T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <class T>
T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;
}

// ---- device math: what the kernels call, with the rounding CUDA documents ----------------------
// The _rn intrinsics are single correctly rounded operations (never fused): this file is
// compiled with -ffp-contract=off. The fast-math ones (__expf ...) use the accurate functions,
// so the emulator is at least as accurate as a GPU: only tolerances carry over.

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline double rsqrt(double a) { return 1.0 / std::sqrt(a); }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned int x) { return x == 0 ? 32 : __builtin_clz(x); }
inline int __ffs(unsigned int x) { return __builtin_ffs(static_cast<int>(x)); }
inline float __uint_as_float(unsigned int x) { return zt_emu::from_bits<float>(x); }
inline unsigned int __float_as_uint(float x) { return static_cast<unsigned int>(zt_emu::to_bits(x)); }
inline float __int_as_float(int x) { return zt_emu::from_bits<float>(static_cast<uint32_t>(x)); }
inline int __float_as_int(float x) { return static_cast<int>(zt_emu::to_bits(x)); }
inline double __longlong_as_double(long long x) { return zt_emu::from_bits<double>(static_cast<uint64_t>(x)); }
inline long long __double_as_longlong(double x) { return static_cast<long long>(zt_emu::to_bits(x)); }
template <class T>
T __ldg(const T* address) { return *address; }
// CUDA's device min/max overloads (global namespace in device code).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
