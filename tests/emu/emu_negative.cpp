// Negative tests: the emulated device's checks bite. Each case runs a correct kernel first (the
// control; it must pass) and then a copy of a real kernel of src/backend/cuda with one bug
// planted; ctest (tests/CMakeLists.txt) passes the case when the output names the problem:
//   missing_barrier_before_read   block_sum (cuda_kernels.cuh) without its first barrier: reads
//                                 poisoned shared memory (NaN) under any schedule
//   missing_trailing_barrier      block_sum without its trailing barrier, called twice (as the
//                                 norms do): a wrong total under the warp-serial schedule, a
//                                 data race under ThreadSanitizer
//   missing_syncwarp              the online-softmax row update of cuda_attention_forward.cu
//                                 without __syncwarp: right values, a race for ThreadSanitizer
//   off_by_one_global             an elementwise kernel writing one element past its buffer:
//                                 AddressSanitizer (device red zone)
//   off_by_one_shared             block_sum indexing scratch[32]: AddressSanitizer
//   too_much_shared               the attention kernel's 100 KiB of dynamic shared memory
//                                 without cudaFuncSetAttribute: a launch error naming it
//   host_read_before_sync         CudaBackendImpl::download without the synchronisation: the
//                                 host reads stale data
//   divergent_barrier, early_exit, shuffle_outside_mask, pageable_argument: the emulator's own
//                                 faults, with every thread's file:line
//   pinned_argument               a kernel writing pinned host memory that was not allocated with
//                                 cudaHostAllocMapped (a host buffer where a device one was meant)
//   ldmatrix_misaligned, ldmatrix_global, mma_half_warp: the tensor-core instructions
//                                 (emu/emu_mma.h) on a row address 4 bytes off, on a row in global
//                                 memory, or called by 16 lanes only
//   cp_async_never_waited, cp_async_misaligned, cp_async_global_target: a thread that exits with
//                                 cp.async copies it never waited for; a source 4 bytes off; a
//                                 target in global memory
//   fault_named_by_sync           the CUDA backend's fill on pageable memory with ZT_CUDA_SYNC=1:
//                                 the error names fill_kernel and its launch site
//   transfer_ignores_event        CudaBackendImpl::transfer_async without its wait for the compute
//                                 stream: right data under deferred streams, stale data under
//                                 ZT_EMU_STREAMS=random (the copy runs before the kernel)
//   device_copy_unordered         a side stream reading the destination of a blocking device-to-
//                                 device cudaMemcpy without waiting for it: stale data
//   ldmatrix_without_syncwarp     lanes write a shared tile and load it with ldmatrix without
//                                 __syncwarp: a wrong product (a race for ThreadSanitizer)
//   cp_async_read_before_wait     threads read each other's cp.async copies after a barrier but
//                                 before their wait_group: stale (poisoned) values
//   cp_async_refill_before_read   a warp refills by cp.async a row another warp still reads (the
//                                 copies issued before the barrier that ends the reads): with
//                                 ZT_EMU_ASYNC_COPIES=at-issue, the reader sees the new values
// Usage: zt_emu_negative CASE. Prints CONTROL FAILED if the correct kernel fails.
#include "emu/emu_predefine.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_async_copy.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "core/error.h"

namespace {

using zt::cuda::launch;

[[noreturn]] void control_failed(const std::string& what) {
  std::printf("CONTROL FAILED: %s\n", what.c_str());
  std::exit(3);
}

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    std::printf("%s: %s (%s)\n", call, cudaGetErrorName(status), cudaGetErrorString(status));
    std::fflush(stdout);
    std::exit(1);
  }
}

template <class T>
T* device_array(size_t count) {
  void* pointer = nullptr;
  check(cudaMalloc(&pointer, count * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(pointer);
}

template <class T>
std::vector<T> download(const T* device, size_t count) {
  std::vector<T> host(count);
  check(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

// ---- block_sum and its broken copies (cuda_kernels.cuh) ----------------------------------------

__device__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

enum class Bug { None, NoBarrierBeforeRead, NoTrailingBarrier, SharedOffByOne };

__device__ float block_sum(float value, float* scratch, Bug bug) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_sum(value);
  if (lane == 0) scratch[bug == Bug::SharedOffByOne ? warp + 32 - warps + 1 : warp] = value;
  if (bug != Bug::NoBarrierBeforeRead) __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  if (bug != Bug::NoTrailingBarrier) __syncthreads();
  return total;
}

// out[2 * thread + c]: every thread's two block totals (of 1 and of 2 per thread).
__global__ void two_sums_kernel(float* out, Bug bug) {
  ZT_SHARED(float, scratch, [32]);
  const float first = block_sum(1.0f, scratch, bug);
  const float second = block_sum(2.0f, scratch, bug);
  out[2 * threadIdx.x] = first;
  out[2 * threadIdx.x + 1] = second;
}

// Runs two_sums_kernel with 256 threads; true when every thread got 256 and 512.
bool two_sums_right(Bug bug, bool report) {
  constexpr int kThreads = 256;
  float* out = device_array<float>(2 * kThreads);
  launch({1, kThreads, 0, nullptr}, two_sums_kernel, out, bug);
  check(cudaGetLastError(), "launch");
  const std::vector<float> host = download(out, 2 * kThreads);
  cudaFree(out);
  for (int thread = 0; thread < kThreads; ++thread) {
    for (int c = 0; c < 2; ++c) {
      const float expected = 256.0f * static_cast<float>(c + 1);
      if (host[2 * thread + c] != expected) {
        if (report) {
          std::printf("wrong result: thread %d's block sum %d is %g, expected %g (a barrier is "
                      "missing)\n", thread, c, static_cast<double>(host[2 * thread + c]),
                      static_cast<double>(expected));
        }
        return false;
      }
    }
  }
  return true;
}

int block_sum_case(Bug bug) {
  if (!two_sums_right(Bug::None, false)) control_failed("block_sum with its barriers");
  if (two_sums_right(bug, true)) std::printf("not detected: every block sum was right\n");
  return 1;
}

// ---- the online-softmax row update (cuda_attention_forward.cu) ---------------------------------

// 4 lanes per row: each lane reads the row's running max, the lanes agree on the tile max by
// shuffles, and lane 0 writes the new max: the __syncwarp keeps the write after every read.
__global__ void row_max_kernel(float* out, const float* scores, bool with_syncwarp) {
  ZT_SHARED(float, row_max, [64]);
  constexpr int kLanesPerRow = 4;
  const int row = threadIdx.x / kLanesPerRow, part = threadIdx.x % kLanesPerRow;
  if (part == 0) row_max[row] = -INFINITY;
  __syncthreads();
  for (int tile = 0; tile < 3; ++tile) {
    float tile_max = scores[(tile * 64 + row) * kLanesPerRow + part];
    for (int offset = 1; offset < kLanesPerRow; offset *= 2) {
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xFFFFFFFFu, tile_max, offset));
    }
    const float old_max = row_max[row];
    const float new_max = fmaxf(old_max, tile_max);
    float rescale = expf(old_max - new_max);
    for (int offset = 1; offset < kLanesPerRow; offset *= 2) {
      rescale += __shfl_xor_sync(0xFFFFFFFFu, rescale, offset) * 0.0f;
    }
    if (with_syncwarp) __syncwarp();
    if (part == 0) row_max[row] = new_max;
    __syncthreads();
  }
  out[threadIdx.x] = row_max[row];
}

int missing_syncwarp_case() {
  std::vector<float> scores(3 * 64 * 4);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>((i * 37) % 101);
  float* device_scores = device_array<float>(scores.size());
  check(cudaMemcpy(device_scores, scores.data(), scores.size() * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  float* out = device_array<float>(256);
  for (int with_syncwarp = 1; with_syncwarp >= 0; --with_syncwarp) {
    launch({1, 256, 0, nullptr}, row_max_kernel, out, device_scores, with_syncwarp == 1);
    const std::vector<float> host = download(out, 256);
    for (int thread = 0; thread < 256; ++thread) {
      const int row = thread / 4;
      float expected = -INFINITY;
      for (int tile = 0; tile < 3; ++tile)
        for (int part = 0; part < 4; ++part) expected = std::fmax(expected, scores[(tile * 64 + row) * 4 + part]);
      if (host[thread] != expected) {
        if (with_syncwarp) control_failed("row max with __syncwarp");
        std::printf("wrong result without __syncwarp at thread %d\n", thread);
        return 1;
      }
    }
  }
  std::printf("values right without __syncwarp (only ThreadSanitizer sees this race)\n");
  return 1;
}

// ---- out of bounds -------------------------------------------------------------------------

// scale_kernel with the bound check `i <= n` instead of `i < n`.
__global__ void scale_kernel(float* x, int n, float factor, bool off_by_one) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (off_by_one ? i <= n : i < n) x[i] *= factor;
}

int off_by_one_global_case() {
  constexpr int n = 256;  // a multiple of the 256-byte allocation granularity: x[n] is a red zone
  float* x = device_array<float>(n);
  check(cudaMemset(x, 0, n * sizeof(float)), "cudaMemset");
  launch({2, 256, 0, nullptr}, scale_kernel, x, n, 2.0f, false);
  check(cudaDeviceSynchronize(), "control");
  launch({2, 256, 0, nullptr}, scale_kernel, x, n, 2.0f, true);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::printf("not detected: the write past the end went unnoticed\n");
  return 1;
}

// ---- launch configuration ------------------------------------------------------------------

__global__ void tile_kernel(float* out) {
  ZT_DYNAMIC_SHARED(float, shared);
  shared[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = shared[blockDim.x - 1 - threadIdx.x];
}

int too_much_shared_case() {
  float* out = device_array<float>(128);
  launch({1, 128, 16 * 1024, nullptr}, tile_kernel, out);
  if (cudaGetLastError() != cudaSuccess || download(out, 128)[0] != 127.0f) control_failed("16 KiB tile");
  launch({1, 128, 100 * 1024, nullptr}, tile_kernel, out);  // the attention forward's D=128 tile
  const cudaError_t status = cudaGetLastError();
  std::printf("launch with 100 KiB of dynamic shared memory: %s: %s\n", cudaGetErrorName(status),
              cudaGetErrorString(status));
  return 1;
}

// ---- the host reads before the stream synchronisation ------------------------------------------

__global__ void iota_kernel(float* out, float base) { out[threadIdx.x] = base + static_cast<float>(threadIdx.x); }

int host_read_before_sync_case() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  float* device = device_array<float>(64);
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, 64 * sizeof(float)), "cudaMallocHost");
  float* host = static_cast<float*>(pinned);
  for (int synchronise = 1; synchronise >= 0; --synchronise) {
    std::memset(host, 0, 64 * sizeof(float));
    launch({1, 64, 0, stream}, iota_kernel, device, 10.0f * static_cast<float>(synchronise));
    check(cudaMemcpyAsync(host, device, 64 * sizeof(float), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    if (synchronise) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const bool right = host[63] == 10.0f * static_cast<float>(synchronise) + 63.0f;
    if (synchronise && !right) control_failed("download with the synchronisation");
    if (!synchronise && !right) {
      std::printf("stale data: the host read the copy's destination before the stream "
                  "synchronisation (got %g, expected %g)\n", static_cast<double>(host[63]), 63.0);
      return 1;
    }
  }
  std::printf("not detected: the host read the right data without synchronising\n");
  return 1;
}

// ---- a side stream that does not wait for the compute stream -----------------------------------

// CudaBackendImpl::transfer_async (cuda_memory.cu): the copy on the transfer stream waits for an
// event recorded after the compute issued so far. The mutant drops that wait. The host then
// waits for the compute stream (the step's one wait) and for the transfer, so under the default
// deferred schedule the compute has always run when the copy does: the mutant passes there.
// Under ZT_EMU_STREAMS=random a queued copy may run at once, before the kernel it should follow.
// Returns how many of `rounds` transfers copied the kernel's data.
int transfers_right(bool wait_for_compute, int rounds) {
  cudaStream_t compute = nullptr, transfer = nullptr;
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaStreamCreateWithFlags(&transfer, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cudaEvent_t issued = nullptr;
  check(cudaEventCreateWithFlags(&issued, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  float* activation = device_array<float>(64);
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, 64 * sizeof(float)), "cudaMallocHost");
  float* host = static_cast<float*>(pinned);
  int right = 0;
  for (int round = 0; round < rounds; ++round) {
    const float base = 100.0f * static_cast<float>(round + 1);
    launch({1, 64, 0, compute}, iota_kernel, activation, base);
    if (wait_for_compute) {
      check(cudaEventRecord(issued, compute), "cudaEventRecord");
      check(cudaStreamWaitEvent(transfer, issued, 0), "cudaStreamWaitEvent");
    }
    check(cudaMemcpyAsync(host, activation, 64 * sizeof(float), cudaMemcpyDeviceToHost, transfer), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    check(cudaStreamSynchronize(transfer), "cudaStreamSynchronize");
    right += host[63] == base + 63.0f ? 1 : 0;
  }
  cudaFreeHost(pinned);
  cudaFree(activation);
  cudaEventDestroy(issued);
  cudaStreamDestroy(transfer);
  cudaStreamDestroy(compute);
  return right;
}

int transfer_ignores_event_case() {
  constexpr int kRounds = 32;
  setenv("ZT_EMU_STREAMS", "deferred", 1);
  if (transfers_right(true, kRounds) != kRounds) control_failed("transfers after the event (deferred streams)");
  std::printf("deferred streams: %d of %d transfers without the wait copied the right data\n",
              transfers_right(false, kRounds), kRounds);
  setenv("ZT_EMU_STREAMS", "random:1", 1);
  if (transfers_right(true, kRounds) != kRounds) control_failed("transfers after the event (random streams)");
  const int right = transfers_right(false, kRounds);
  if (right < kRounds) {
    std::printf("stale data: %d of %d transfers without the wait copied the activation before the kernel "
                "that writes it ran (ZT_EMU_STREAMS=random:1)\n", kRounds - right, kRounds);
  } else {
    std::printf("not detected: every transfer without the wait copied the right data\n");
  }
  return 1;
}

// A blocking device-to-device cudaMemcpy returns before the copy ran (CUDA's API synchronisation
// rules): a non-blocking stream that reads the destination must wait for the legacy stream.
// The mutant reads it at once; the control waits for an event recorded on the legacy stream.
int device_copy_unordered_case() {
  cudaStream_t side = nullptr;
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cudaEvent_t copied = nullptr;
  check(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  float* source = device_array<float>(64);
  float* destination = device_array<float>(64);
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, 64 * sizeof(float)), "cudaMallocHost");
  float* host = static_cast<float*>(pinned);
  for (int ordered = 1; ordered >= 0; --ordered) {
    launch({1, 64, 0, side}, iota_kernel, source, 10.0f * static_cast<float>(ordered + 1));
    check(cudaMemset(destination, 0, 64 * sizeof(float)), "cudaMemset");
    check(cudaStreamSynchronize(side), "cudaStreamSynchronize");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(destination, source, 64 * sizeof(float), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    if (ordered) {
      check(cudaEventRecord(copied, nullptr), "cudaEventRecord");
      check(cudaStreamWaitEvent(side, copied, 0), "cudaStreamWaitEvent");
    }
    check(cudaMemcpyAsync(host, destination, 64 * sizeof(float), cudaMemcpyDeviceToHost, side), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(side), "cudaStreamSynchronize");
    const float expected = 10.0f * static_cast<float>(ordered + 1) + 63.0f;
    if (ordered && host[63] != expected) control_failed("a device copy the side stream waits for");
    if (!ordered && host[63] != expected) {
      std::printf("stale data: the side stream read the destination of a blocking device-to-device cudaMemcpy "
                  "before the copy ran (got %g, expected %g)\n", static_cast<double>(host[63]),
                  static_cast<double>(expected));
      return 1;
    }
  }
  std::printf("not detected: the device-to-device cudaMemcpy had run when the side stream read it\n");
  return 1;
}

// ---- a warp matrix load without __syncwarp -------------------------------------------------------

// One mma m16n8k16 of a 16x16 bf16 tile of ones in shared memory (lane l writes column l % 16 of
// rows 8 (l / 16) .. + 7, then the warp loads it with ldmatrix as the A operand) and a B of ones:
// every output is 16. A lane's ldmatrix row holds elements other lanes wrote, so the load needs
// a __syncwarp first; ldmatrix does not imply one. The bugs: the __syncwarp left out, a row
// address 4 bytes off, a row in global memory, 16 lanes only.
enum class MmaBug { None, NoSyncwarp, Misaligned, GlobalRow, HalfWarp };

constexpr int kTileLd = 24;  // the tile's padded leading dimension (16-byte rows apart)
struct alignas(16) SharedTile {
  uint16_t element[16 * kTileLd];
};

__global__ void mma_shared_tile_kernel(float* out, const uint16_t* global_tile, MmaBug bug) {
  ZT_SHARED(SharedTile, shared, [1]);
  uint16_t* tile = shared[0].element;
  const int lane = static_cast<int>(threadIdx.x);
  constexpr uint16_t kOne = 0x3F80;  // bf16 1.0
  for (int row = 8 * (lane / 16); row < 8 * (lane / 16) + 8; ++row) tile[row * kTileLd + lane % 16] = kOne;
  if (bug != MmaBug::NoSyncwarp) __syncwarp();
  if (bug == MmaBug::HalfWarp && lane >= 16) return;
  const uint16_t* base = bug == MmaBug::GlobalRow ? global_tile : tile;
  const uint16_t* row = base + (lane % 16) * kTileLd + (lane / 16) * 8 + (bug == MmaBug::Misaligned ? 2 : 0);
  uint32_t a[4];
  zt_mma::ldmatrix_x4(a, row);
  constexpr uint32_t kOnes = 0x3F803F80u;
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  zt_mma::mma_m16n8k16<__nv_bfloat16>(d, a, kOnes, kOnes);
  for (int e = 0; e < 4; ++e) out[lane * 4 + e] = d[e];
}

// Runs mma_shared_tile_kernel; true when every output is 16.
bool mma_right(MmaBug bug, const uint16_t* global_tile, bool report) {
  float* out = device_array<float>(128);
  launch({1, 32, 0, nullptr}, mma_shared_tile_kernel, out, global_tile, bug);
  if (bug != MmaBug::None && bug != MmaBug::NoSyncwarp) return true;  // the fault is reported later
  const std::vector<float> host = download(out, 128);
  for (int i = 0; i < 128; ++i) {
    if (host[i] == 16.0f) continue;
    if (report) {
      std::printf("wrong result: element %d of the product is %g, expected 16 (ldmatrix read rows "
                  "other lanes had not written yet)\n", i, static_cast<double>(host[i]));
    }
    return false;
  }
  return true;
}

int ldmatrix_without_syncwarp_case() {
  if (!mma_right(MmaBug::None, nullptr, false)) control_failed("ldmatrix after __syncwarp");
  if (mma_right(MmaBug::NoSyncwarp, nullptr, true)) {
    std::printf("values right without __syncwarp (only ThreadSanitizer sees this race)\n");
  }
  return 1;
}

// 32 threads each copy 16 bytes of a 128-float row with cp.async, then every thread reads the
// next thread's copy after a barrier: it must wait for its own copies (cp.async.wait_group)
// before that barrier. The bug: the wait after the read.
struct alignas(16) SharedFloats {
  float element[128];
};

enum class AsyncBug { None, ReadBeforeWait, NeverWaited, Misaligned, GlobalTarget };

__global__ void async_copy_kernel(float* out, const float* source, AsyncBug bug) {
  ZT_SHARED(SharedFloats, shared, [1]);
  float* row = shared[0].element;
  const int thread = static_cast<int>(threadIdx.x);
  float* target = bug == AsyncBug::GlobalTarget ? out + 4 * thread : row + 4 * thread;
  zt::cuda::async_copy_16(target, source + 4 * thread + (bug == AsyncBug::Misaligned ? 1 : 0));
  zt::cuda::async_copy_commit();
  if (bug == AsyncBug::NeverWaited) return;
  if (bug == AsyncBug::None) zt::cuda::async_copy_wait<0>();
  __syncthreads();
  out[thread] = row[(4 * thread + 4) % 128];
  if (bug == AsyncBug::ReadBeforeWait) zt::cuda::async_copy_wait<0>();
}

// A device row of 128 floats, each its own index: what the cp.async cases copy.
const float* row_of_indices() {
  std::vector<float> values(128);
  for (int i = 0; i < 128; ++i) values[i] = static_cast<float>(i);
  float* source = device_array<float>(128);
  check(cudaMemcpy(source, values.data(), sizeof(float) * 128, cudaMemcpyHostToDevice), "cudaMemcpy");
  return source;
}

int cp_async_read_before_wait_case() {
  const float* source = row_of_indices();
  float* out = device_array<float>(32);
  for (AsyncBug bug : {AsyncBug::None, AsyncBug::ReadBeforeWait}) {
    launch({1, 32, 0, nullptr}, async_copy_kernel, out, source, bug);
    const std::vector<float> host = download(out, 32);
    for (int thread = 0; thread < 32; ++thread) {
      if (host[thread] == static_cast<float>((4 * thread + 4) % 128)) continue;
      if (bug == AsyncBug::None) control_failed("reads after cp.async.wait_group and a barrier");
      std::printf("wrong result: thread %d read %g, expected %d (the copy was not waited for)\n", thread,
                  static_cast<double>(host[thread]), (4 * thread + 4) % 128);
      return 1;
    }
  }
  std::printf("not detected: every read was right\n");
  return 1;
}

// 64 threads: warp 0 reads a row that warp 1 then refills by cp.async. Right: warp 1 issues its
// copies after the barrier that ends warp 0's reads. The bug: issued before it (and waited for
// after it), so a copy may land while warp 0 still reads the row. Copies done at their wait
// (the default) hide it; done at their issue (ZT_EMU_ASYNC_COPIES=at-issue) they show it.
__global__ void async_refill_kernel(float* out, const float* source, bool refill_early) {
  ZT_SHARED(SharedFloats, shared, [1]);
  float* row = shared[0].element;
  const int thread = static_cast<int>(threadIdx.x);
  const bool reader = thread < 32;
  auto refill = [&] {
    zt::cuda::async_copy_16(row + 4 * (thread - 32), source + 4 * (thread - 32));
    zt::cuda::async_copy_commit();
  };
  if (reader) {
    for (int i = 0; i < 4; ++i) row[4 * thread + i] = -1.0f;
  }
  __syncthreads();
  if (!reader && refill_early) refill();
  __syncthreads();
  const float seen = reader ? row[(4 * thread + 4) % 128] : 0.0f;
  __syncthreads();  // the readers are done with the row
  if (!reader && !refill_early) refill();
  if (!reader) zt::cuda::async_copy_wait<0>();
  __syncthreads();
  if (reader) out[thread] = seen;
}

int cp_async_refill_before_read_case() {
  const float* source = row_of_indices();
  float* out = device_array<float>(32);
  for (bool refill_early : {false, true}) {
    launch({1, 64, 0, nullptr}, async_refill_kernel, out, source, refill_early);
    const std::vector<float> host = download(out, 32);
    for (int thread = 0; thread < 32; ++thread) {
      if (host[thread] == -1.0f) continue;
      if (!refill_early) control_failed("a refill issued after the readers' barrier");
      std::printf("wrong result: thread %d read %g, expected -1 (a cp.async refilled the row before its readers "
                  "were done)\n", thread, static_cast<double>(host[thread]));
      return 1;
    }
  }
  std::printf("not detected: every read was right\n");
  return 1;
}

// ---- the emulator's own faults -------------------------------------------------------------

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void early_exit_kernel(float* out, int n) {
  ZT_SHARED(float, tile, [128]);
  if (static_cast<int>(threadIdx.x) >= n) return;  // the bug: these threads skip the barrier
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % n];
}

__global__ void shuffle_outside_mask_kernel(float* out) {
  float value = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) value += __shfl_xor_sync(0x0000FFFFu, value, 16);  // lane 16 is not in it
  out[threadIdx.x] = value;
}

__global__ void pageable_kernel(float* out) { out[threadIdx.x] = 1.0f; }

int fault_case(const std::string& name) {
  float* out = device_array<float>(128);
  if (name == "divergent_barrier") launch({1, 64, 0, nullptr}, divergent_barrier_kernel, out);
  if (name == "early_exit") launch({1, 128, 0, nullptr}, early_exit_kernel, out, 100);
  if (name == "shuffle_outside_mask") launch({1, 32, 0, nullptr}, shuffle_outside_mask_kernel, out);
  if (name == "ldmatrix_misaligned" || name == "ldmatrix_global" || name == "mma_half_warp") {
    uint16_t* global_tile = device_array<uint16_t>(16 * kTileLd);
    check(cudaMemset(global_tile, 0, 16 * kTileLd * sizeof(uint16_t)), "cudaMemset");
    if (!mma_right(MmaBug::None, global_tile, false)) control_failed("mma_shared_tile_kernel");
    if (name == "ldmatrix_misaligned") mma_right(MmaBug::Misaligned, global_tile, false);
    if (name == "ldmatrix_global") mma_right(MmaBug::GlobalRow, global_tile, false);
    if (name == "mma_half_warp") mma_right(MmaBug::HalfWarp, global_tile, false);
  }
  if (name.rfind("cp_async_", 0) == 0) {
    float* source = device_array<float>(132);
    check(cudaMemset(source, 0, 132 * sizeof(float)), "cudaMemset");
    launch({1, 32, 0, nullptr}, async_copy_kernel, out, source, AsyncBug::None);  // the control
    if (cudaDeviceSynchronize() != cudaSuccess) control_failed("async_copy_kernel");
    if (name == "cp_async_never_waited") launch({1, 32, 0, nullptr}, async_copy_kernel, out, source, AsyncBug::NeverWaited);
    if (name == "cp_async_misaligned") launch({1, 32, 0, nullptr}, async_copy_kernel, out, source, AsyncBug::Misaligned);
    if (name == "cp_async_global_target") launch({1, 32, 0, nullptr}, async_copy_kernel, out, source, AsyncBug::GlobalTarget);
  }
  if (name == "pageable_argument") {
    static float pageable[128];
    launch({1, 128, 0, nullptr}, pageable_kernel, pageable);
  }
  if (name == "pinned_argument") {
    // The bug: a download that converts dtypes written by the kernel straight into the pinned host
    // buffer (CudaBackendImpl::copy converts into device staging, then copies): a GPU would run
    // it across the bus. The control: memory allocated with cudaHostAllocMapped is meant for it.
    void* mapped = nullptr;
    check(cudaHostAlloc(&mapped, 128 * sizeof(float), cudaHostAllocMapped), "cudaHostAlloc");
    launch({1, 128, 0, nullptr}, pageable_kernel, static_cast<float*>(mapped));
    if (cudaDeviceSynchronize() != cudaSuccess) control_failed("a kernel writing mapped pinned memory");
    void* pinned = nullptr;
    check(cudaMallocHost(&pinned, 128 * sizeof(float)), "cudaMallocHost");
    launch({1, 128, 0, nullptr}, pageable_kernel, static_cast<float*>(pinned));
  }
  const cudaError_t status = cudaDeviceSynchronize();
  std::printf("cudaDeviceSynchronize: %s: %s\n", cudaGetErrorName(status), cudaGetErrorString(status));
  const cudaError_t again = cudaMemset(out, 0, 4);
  std::printf("the next call: %s (the fault is sticky)\n", cudaGetErrorName(again));
  return 1;
}

}  // namespace

// ZT_CUDA_SYNC=1: the fault is reported by the launch itself, naming the kernel.
int fault_named_by_sync_case() {
  setenv("ZT_CUDA_SYNC", "1", 1);
  std::unique_ptr<zt::CudaBackend> backend = zt::make_cuda_backend(0);
  std::vector<float> host(64, 0.0f);
  zt::Buffer control(*backend, host.size() * sizeof(float));
  backend->fill(control.view(zt::DType::F32, {64}), 1.0f);  // the control: a correct fill
  try {
    // Pageable host memory labelled as device memory: the kernel faults when it runs.
    backend->fill(zt::Tensor(host.data(), zt::DType::F32, {64}, zt::Device::CUDA), 1.0f);
  } catch (const zt::Error& error) {
    std::printf("%s\n", error.what());
    return 1;
  }
  std::printf("no error from the faulting fill\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: zt_emu_negative CASE (see the first comment of emu_negative.cpp)\n");
    return 2;
  }
  const std::string name = argv[1];
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // nothing lost when a sanitizer aborts
  if (name == "missing_barrier_before_read") return block_sum_case(Bug::NoBarrierBeforeRead);
  if (name == "missing_trailing_barrier") return block_sum_case(Bug::NoTrailingBarrier);
  if (name == "off_by_one_shared") return block_sum_case(Bug::SharedOffByOne);
  if (name == "missing_syncwarp") return missing_syncwarp_case();
  if (name == "off_by_one_global") return off_by_one_global_case();
  if (name == "too_much_shared") return too_much_shared_case();
  if (name == "host_read_before_sync") return host_read_before_sync_case();
  if (name == "fault_named_by_sync") return fault_named_by_sync_case();
  if (name == "transfer_ignores_event") return transfer_ignores_event_case();
  if (name == "device_copy_unordered") return device_copy_unordered_case();
  if (name == "ldmatrix_without_syncwarp") return ldmatrix_without_syncwarp_case();
  if (name == "cp_async_read_before_wait") return cp_async_read_before_wait_case();
  if (name == "cp_async_refill_before_read") return cp_async_refill_before_read_case();
  if (name == "divergent_barrier" || name == "early_exit" || name == "shuffle_outside_mask" ||
      name == "pageable_argument" || name == "pinned_argument" || name == "ldmatrix_misaligned" ||
      name == "ldmatrix_global" || name == "mma_half_warp" || name == "cp_async_never_waited" ||
      name == "cp_async_misaligned" || name == "cp_async_global_target") {
    return fault_case(name);
  }
  std::fprintf(stderr, "zt_emu_negative: unknown case '%s'\n", name.c_str());
  return 2;
}
