// The emulated device's internal seams, shared by its parts and by nothing else:
//   emu_runtime.cpp  streams, events, copies, errors, device properties (the CUDA runtime API)
//   emu_memory.cpp   the device-memory arena, pinned host memory, pointer classification
//   emu_device.cpp   kernel launches: blocks of fibers, barriers, warp operations, schedules
//   emu_cublaslt.cpp the cuBLASLt subset the backend calls
//   emu_nccl.cpp     the NCCL subset, over MPI between the ranks' processes
// The project's code never includes this header: it sees the real CUDA, cuBLASLt and NCCL
// headers (whose functions these files define) and emu/emu_device.h (built-ins for kernels).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace zt_emu {

// ---- dot products (the emulated cuBLASLt's and cuDNN's matmuls) -------------------------------

// For every (i < m, j < n): out(i, j, sum) with sum the dot product of a_rows[i * k ..] and
// b_columns[j * k ..] (k floats each), products in double added in k order. In blocks of 4 x 4
// outputs: 16 independent sums keep the FPU busy; a partial block repeats its last row / column,
// whose sums are not handed out.
template <class Out>
void blocked_dot_products(const float* a_rows, const float* b_columns, size_t m, size_t n, size_t k,
                          Out out) {
  constexpr size_t kBlock = 4;
  for (size_t j0 = 0; j0 < n; j0 += kBlock) {
    const size_t columns = n - j0 < kBlock ? n - j0 : kBlock;
    for (size_t i0 = 0; i0 < m; i0 += kBlock) {
      const size_t rows = m - i0 < kBlock ? m - i0 : kBlock;
      double sums[kBlock][kBlock] = {};
      const float* a_row[kBlock];
      const float* b_column[kBlock];
      for (size_t r = 0; r < kBlock; ++r) a_row[r] = a_rows + (i0 + (r < rows ? r : rows - 1)) * k;
      for (size_t c = 0; c < kBlock; ++c) b_column[c] = b_columns + (j0 + (c < columns ? c : columns - 1)) * k;
      for (size_t p = 0; p < k; ++p) {
        for (size_t r = 0; r < kBlock; ++r) {
          const double a_value = a_row[r][p];
          for (size_t c = 0; c < kBlock; ++c) sums[r][c] += a_value * b_column[c][p];
        }
      }
      for (size_t c = 0; c < columns; ++c) {
        for (size_t r = 0; r < rows; ++r) out(i0 + r, j0 + c, sums[r][c]);
      }
    }
  }
}

// ---- errors (emu_runtime.cpp) ------------------------------------------------------------------

// A fault found while device work runs (a divergent barrier, a kernel pointer to pageable or
// freed memory, a lane outside a shuffle's mask, a bad cuBLASLt operand ...). Thrown inside
// queued work; the stream drain catches it, prints it once to stderr and makes it the sticky
// error (cudaErrorLaunchFailure) that every later runtime call returns, as a real GPU does after
// an illegal address. cudaGetErrorString then returns this message.
struct DeviceFault {
  std::string message;
};
[[noreturn]] void device_fault(std::string message);

// A call's own, non-sticky error (a bad launch configuration): recorded so that the next
// cudaGetLastError / cudaPeekAtLastError returns it, with `message` as its cudaGetErrorString
// text, and printed to stderr when ZT_EMU_VERBOSE is set.
void set_last_error(cudaError_t error, std::string message);

// The sticky error's code, cudaSuccess while there is none.
cudaError_t sticky_error();

// ---- the device lock ---------------------------------------------------------------------------

// One recursive lock around all device state (queues, arena, communicators): held by every
// runtime call and while queued work runs. Query calls (cudaEventQuery, cudaStreamQuery) only
// try it, and answer cudaErrorNotReady when another host thread is draining, so that a
// watchdog thread never blocks behind a collective that waits for another rank.
std::recursive_mutex& device_lock();

// ---- streams (emu_runtime.cpp) -----------------------------------------------------------------

// Work queued on a stream. Nothing runs when it is queued: `run` executes when the host waits
// for it (cudaStreamSynchronize, cudaEventSynchronize, a blocking copy, cudaDeviceSynchronize,
// cudaFree ...), in stream order, so that a host read before the synchronisation sees the old
// contents, as on a GPU whose kernel has not finished. Work that waits on other processes (an
// NCCL collective) sets `done`: after `run` started it, the drain polls `done` and, between
// polls, runs other streams' queued work (a GPU runs streams concurrently), so that two ranks
// that drain their streams in different orders cannot deadlock.
struct Work {
  std::string what;                 // for messages: "kernel launched at file:line", "memcpy ..."
  std::function<void()> run;
  std::function<bool()> done;       // empty: finished when run returns
};

// Queues `work` on `stream` (nullptr / cudaStreamLegacy: the legacy default stream, with its
// implicit ordering against blocking streams; cudaStreamPerThread: treated as the legacy one).
// An unknown or destroyed stream is a device_fault naming it.
void enqueue(cudaStream_t stream, Work work);

// Runs queued work of every stream until all queues are empty (cudaDeviceSynchronize).
void drain_all();

// ---- memory (emu_memory.cpp) -------------------------------------------------------------------

enum class Memory {
  Null,         // nullptr
  Device,       // inside a live cudaMalloc allocation (one past its end included)
  Pinned,       // inside a live cudaHostAlloc / cudaMallocHost allocation: device-accessible (UVA)
  FreedDevice,  // inside the arena but not inside a live allocation: freed, or a red zone
  Pageable,     // anything else: ordinary host memory a GPU cannot dereference
};
Memory classify(const void* pointer);
const char* memory_name(Memory memory);  // "device memory", "pageable host memory", ...

// A kernel or library operand: `pointer` with `bytes` readable/writable by the device, else a
// device_fault naming `what` (e.g. "argument 2 of kernel launched at cuda_norms.cu:231") and
// the kind of memory it points to. bytes == 0 checks the pointer alone.
void check_device_accessible(const void* pointer, size_t bytes, const std::string& what);

// An operand of a kernel, cuBLASLt, cuDNN or NCCL: check_device_accessible's rule, and pinned
// host memory only when it was allocated with cudaHostAllocMapped. A GPU under unified
// addressing would read any pinned memory across the bus; unasked, that is a host buffer passed
// where a device buffer was meant (slow at every access, and the host may rewrite it meanwhile),
// so it is a device_fault here. Copies take pinned memory under check_device_accessible's rule.
void check_kernel_operand(const void* pointer, size_t bytes, const std::string& what);

// The live allocation holding `pointer` (device or pinned): its base and size; false otherwise.
bool find_allocation(const void* pointer, const void** base, size_t* bytes);

// ---- kernels (emu_device.cpp / emu_runtime.cpp) ------------------------------------------------

// The dynamic shared memory a kernel may request above 48 KiB, as set by
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes); 48 KiB
// (the default) when never set. Stored by emu_runtime.cpp, read by launches.
int max_dynamic_shared_bytes(const void* kernel);
void set_max_dynamic_shared_bytes(const void* kernel, int bytes);

// The limits of the emulated device (sm_90, as an H100).
constexpr int kWarpSize = 32;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDimX = 1024, kMaxBlockDimY = 1024, kMaxBlockDimZ = 64;
constexpr unsigned int kMaxGridDimX = 2147483647u, kMaxGridDimY = 65535u, kMaxGridDimZ = 65535u;
constexpr size_t kDefaultSharedBytes = 48 * 1024;     // without cudaFuncSetAttribute
constexpr size_t kMaxSharedBytesOptin = 227 * 1024;   // static + dynamic, per block
constexpr int kMultiprocessors = 132;

// ---- call counters (emu_counters.cpp) ----------------------------------------------------------

// Counts one call of `category` ("host_waits": a call in which the host waits for device work;
// "vmm": a virtual-memory driver call). ZT_EMU_CALL_REPORT=PATH writes the counts at exit
// (emu_counters.cpp), for tests that bound a step's synchronisations and driver calls.
// Between cudaProfilerStart and cudaProfilerStop (set_capturing) a call also counts under
// "captured <category>", and each start counts as "capture_ranges" / "cudaProfilerStart".
// `amount`: what the call adds (1 a call; bytes for "copy_bytes").
void count_call(const char* category, const char* call, uint64_t amount = 1);
// The file a report named by environment `variable` (set) goes to: its value + "." + the MPI rank
// from the launcher's environment, else the pid (the memory and call reports).
std::string report_path(const char* variable);
void set_capturing(bool capturing);
inline void count_host_wait(const char* call) { count_call("host_waits", call); }

// Environment knobs (read once):
//   ZT_EMU_DEVICE_MEMORY  device memory of the process (its devices share one arena), e.g. 4GiB
//   ZT_EMU_DEVICES        devices a process sees (default 8, PCI bus ids 0000:01:00.0 ...)
//   ZT_EMU_SCHEDULE       in-order | warp-serial | reversed | random[:seed] (default in-order)
//   ZT_EMU_STREAMS        deferred | random[:seed]: queued work only when waited for, or also
//                         eagerly/late at a seeded coin (emu_runtime.cpp; read at every queuing)
//   ZT_EMU_VERBOSE        1: print launch errors and faults as they happen
size_t env_bytes(const char* name, size_t fallback);  // "4GiB", "512MiB", "65536"
int env_int(const char* name, int fallback);

}  // namespace zt_emu
