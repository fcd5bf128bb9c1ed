// The emulated device's kernel execution (src/emu/emu_device.cpp): built-in indices over
// 3-D grids and blocks, barriers, every shuffle flavour with widths, votes, atomics, shared
// memory (static per block and declaration, dynamic, poisoned before each block), launch
// errors as the driver reports them, and deferred execution (nothing runs before the host
// waits). Faults that make the device sticky are in emu_negative.cpp (one process per case).
#include "emu/emu_predefine.h"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_launch.h"

namespace {

using zt::cuda::launch;

template <class T>
T* device_array(size_t count) {
  void* pointer = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(&pointer, count * sizeof(T)), cudaSuccess);
  return static_cast<T*>(pointer);
}

template <class T>
std::vector<T> download(const T* device, size_t count) {
  std::vector<T> host(count);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
                      cudaSuccess);
  return host;
}

// out[linear global thread] = its indices packed: x | y << 8 | z << 16 | block linear << 24.
__global__ void indices_kernel(uint32_t* out) {
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const uint32_t thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const uint32_t threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16 | block << 24;
}

BOOST_AUTO_TEST_SUITE(emu_kernels)

BOOST_AUTO_TEST_CASE(indices_cover_3d_grids_and_blocks) {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const size_t blocks = 12, threads = 30;
  uint32_t* out = device_array<uint32_t>(blocks * threads);
  launch({grid, block, 0, nullptr}, indices_kernel, out);
  BOOST_REQUIRE_EQUAL(cudaGetLastError(), cudaSuccess);
  const std::vector<uint32_t> host = download(out, blocks * threads);
  for (uint32_t b = 0; b < blocks; ++b) {
    for (uint32_t z = 0; z < 2; ++z)
      for (uint32_t y = 0; y < 3; ++y)
        for (uint32_t x = 0; x < 5; ++x) {
          const uint32_t t = x + 5 * (y + 3 * z);
          BOOST_TEST(host[b * threads + t] == (x | y << 8 | z << 16 | b << 24));
        }
  }
  cudaFree(out);
}

// Each thread writes its slot, a barrier, then reads its neighbour's: correct only with the
// barrier, under every schedule.
__global__ void rotate_kernel(float* out) {
  ZT_SHARED(float, slots, [128]);
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

BOOST_AUTO_TEST_CASE(barrier_orders_shared_memory) {
  float* out = device_array<float>(3 * 128);
  launch({3, 128, 0, nullptr}, rotate_kernel, out);
  const std::vector<float> host = download(out, 3 * 128);
  for (int i = 0; i < 3 * 128; ++i) BOOST_TEST(host[i] == static_cast<float>((i % 128 + 1) % 128));
  cudaFree(out);
}

// Reads shared memory nobody wrote: the poison (0xFF bytes), so NaN, in every block.
__global__ void unwritten_shared_kernel(float* out, uint32_t* dynamic_out) {
  ZT_SHARED(float, never_written, [4]);
  ZT_DYNAMIC_SHARED(uint32_t, dynamic);
  if (threadIdx.x == 0) {
    out[blockIdx.x] = never_written[blockIdx.x % 4];
    never_written[blockIdx.x % 4] = 1.0f;  // the next block must not see it
    dynamic_out[blockIdx.x] = dynamic[3];
    dynamic[3] = 7;
  }
}

BOOST_AUTO_TEST_CASE(shared_memory_is_poisoned_before_each_block) {
  float* out = device_array<float>(8);
  uint32_t* dynamic_out = device_array<uint32_t>(8);
  launch({8, 32, 16, nullptr}, unwritten_shared_kernel, out, dynamic_out);
  BOOST_REQUIRE_EQUAL(cudaGetLastError(), cudaSuccess);
  for (float value : download(out, 8)) BOOST_TEST(std::isnan(value));
  for (uint32_t value : download(dynamic_out, 8)) BOOST_TEST(value == 0xFFFFFFFFu);
  cudaFree(out);
  cudaFree(dynamic_out);
}

// Every flavour of shuffle, with a width of 8 for the segmented ones.
__global__ void shuffle_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int value = 100 + lane;
  int* row = out + threadIdx.x * 8;
  row[0] = __shfl_sync(0xFFFFFFFFu, value, 5);
  row[1] = __shfl_sync(0xFFFFFFFFu, value, 3, 8);
  row[2] = __shfl_xor_sync(0xFFFFFFFFu, value, 1);
  row[3] = __shfl_xor_sync(0xFFFFFFFFu, value, 9, 8);  // leaves the 8-lane segment: own value
  row[4] = __shfl_up_sync(0xFFFFFFFFu, value, 2);
  row[5] = __shfl_down_sync(0xFFFFFFFFu, value, 3, 8);
  row[6] = static_cast<int>(__ballot_sync(0xFFFFFFFFu, lane % 3 == 0));
  row[7] = __any_sync(0xFFFFFFFFu, lane == 31) + 2 * __all_sync(0xFFFFFFFFu, lane < 31);
}

BOOST_AUTO_TEST_CASE(shuffles_and_votes_follow_the_programming_guide) {
  int* out = device_array<int>(64 * 8);
  launch({1, 64, 0, nullptr}, shuffle_kernel, out);
  const std::vector<int> host = download(out, 64 * 8);
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; lane += 3) ballot |= 1u << lane;
  for (int thread = 0; thread < 64; ++thread) {
    const int lane = thread % 32, segment = lane - lane % 8;
    const int* row = &host[thread * 8];
    BOOST_TEST(row[0] == 105);
    BOOST_TEST(row[1] == 100 + segment + 3);
    BOOST_TEST(row[2] == 100 + (lane ^ 1));
    BOOST_TEST(row[3] == ((lane ^ 9) < segment + 8 ? 100 + (lane ^ 9) : 100 + lane));
    BOOST_TEST(row[4] == (lane >= 2 ? 100 + lane - 2 : 100 + lane));
    BOOST_TEST(row[5] == (lane + 3 < segment + 8 ? 100 + lane + 3 : 100 + lane));
    BOOST_TEST(static_cast<unsigned>(row[6]) == ballot);
    BOOST_TEST(row[7] == 1);  // any: yes; all lanes < 31: no
  }
  cudaFree(out);
}

// Two half-warps shuffle with their own masks at the same time.
__global__ void half_warp_kernel(float* out) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0x0000FFFFu : 0xFFFF0000u;
  float value = static_cast<float>(lane);
  for (int offset = 8; offset > 0; offset /= 2) value += __shfl_xor_sync(mask, value, offset);
  out[threadIdx.x] = value;
}

BOOST_AUTO_TEST_CASE(partial_masks_reduce_independently) {
  float* out = device_array<float>(32);
  launch({1, 32, 0, nullptr}, half_warp_kernel, out);
  const std::vector<float> host = download(out, 32);
  for (int lane = 0; lane < 32; ++lane) BOOST_TEST(host[lane] == (lane < 16 ? 120.0f : 376.0f));
  cudaFree(out);
}

// A partial last warp (48 threads) and lanes that returned: CUDA asks every non-exited lane
// named in the mask to take part, so a full mask is legal as long as no lane reads a missing one.
__global__ void partial_warp_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (threadIdx.x >= 40 && lane % 2 == 1) return;  // odd lanes of the partial warp leave
  const int swapped = __shfl_xor_sync(0xFFFFFFFFu, 100 + lane, 2);  // 2 apart: same parity
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, true);
  out[threadIdx.x * 2] = swapped;
  out[threadIdx.x * 2 + 1] = static_cast<int>(ballot);
}

BOOST_AUTO_TEST_CASE(partial_warps_and_exited_lanes_follow_cuda) {
  int* out = device_array<int>(96);
  BOOST_REQUIRE_EQUAL(cudaMemset(out, 0, 96 * sizeof(int)), cudaSuccess);
  launch({1, 48, 0, nullptr}, partial_warp_kernel, out);
  const std::vector<int> host = download(out, 96);
  unsigned second_warp = 0xFFu;  // lanes 0-7 (threads 32-39), then the even lanes 8-14
  for (int lane = 8; lane < 16; lane += 2) second_warp |= 1u << lane;
  for (int thread = 0; thread < 48; ++thread) {
    const int lane = thread % 32;
    if (thread >= 40 && lane % 2 == 1) {
      BOOST_TEST(host[thread * 2] == 0);  // returned before writing
      continue;
    }
    BOOST_TEST(host[thread * 2] == 100 + (lane ^ 2));
    BOOST_TEST(static_cast<unsigned>(host[thread * 2 + 1]) == (thread < 32 ? 0xFFFFFFFFu : second_warp));
  }
  cudaFree(out);
}

__global__ void null_argument_kernel(float* out, const float* optional_bias) {
  out[threadIdx.x] = optional_bias != nullptr ? optional_bias[threadIdx.x] : 2.0f;
}

BOOST_AUTO_TEST_CASE(a_null_pointer_argument_is_fine_until_dereferenced) {
  float* out = device_array<float>(32);
  launch({1, 32, 0, nullptr}, null_argument_kernel, out, static_cast<const float*>(nullptr));
  BOOST_TEST(download(out, 32)[7] == 2.0f);
  cudaFree(out);
}

__global__ void atomics_kernel(float* sum, unsigned long long* minimum, int* count, unsigned* bits) {
  const unsigned global = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(sum, 0.5f);
  atomicMin(minimum, static_cast<unsigned long long>(1000 - global));
  atomicAdd(count, 1);
  atomicOr(bits, 1u << (global % 32));
}

BOOST_AUTO_TEST_CASE(atomics_from_many_blocks) {
  float* sum = device_array<float>(1);
  unsigned long long* minimum = device_array<unsigned long long>(1);
  int* count = device_array<int>(1);
  unsigned* bits = device_array<unsigned>(1);
  cudaMemset(sum, 0, sizeof(float));
  cudaMemset(minimum, 0xFF, sizeof(unsigned long long));
  cudaMemset(count, 0, sizeof(int));
  cudaMemset(bits, 0, sizeof(unsigned));
  launch({4, 96, 0, nullptr}, atomics_kernel, sum, minimum, count, bits);
  BOOST_TEST(download(sum, 1)[0] == 192.0f);
  BOOST_TEST(download(minimum, 1)[0] == 1000u - 383u);
  BOOST_TEST(download(count, 1)[0] == 384);
  BOOST_TEST(download(bits, 1)[0] == 0xFFFFFFFFu);
  cudaFree(sum);
  cudaFree(minimum);
  cudaFree(count);
  cudaFree(bits);
}

__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }

BOOST_AUTO_TEST_CASE(launches_run_only_when_the_host_waits) {
  float* device = device_array<float>(32);
  void* pinned = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMallocHost(&pinned, 32 * sizeof(float)), cudaSuccess);
  float* host = static_cast<float*>(pinned);
  std::fill(host, host + 32, -1.0f);
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  launch({1, 32, 0, stream}, fill_kernel, device, 3.0f);
  BOOST_REQUIRE_EQUAL(cudaMemcpyAsync(host, device, 32 * sizeof(float), cudaMemcpyDeviceToHost, stream),
                      cudaSuccess);
  BOOST_TEST(host[0] == -1.0f);  // queued, not run: a host read before the sync sees old data
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream), cudaSuccess);
  BOOST_TEST(host[0] == 3.0f);
  BOOST_TEST(host[31] == 3.0f);
  cudaStreamDestroy(stream);
  cudaFreeHost(pinned);
  cudaFree(device);
}

__global__ void big_shared_kernel(float* out) {
  ZT_DYNAMIC_SHARED(float, shared);
  shared[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = shared[(threadIdx.x + 1) % blockDim.x];
}

BOOST_AUTO_TEST_CASE(launch_limits_are_the_drivers) {
  float* out = device_array<float>(64);
  cudaGetLastError();
  launch({1, 1025, 0, nullptr}, fill_kernel, out, 1.0f);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // not sticky
  launch({1, dim3(32, 1, 65), 0, nullptr}, fill_kernel, out, 1.0f);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  launch({dim3(1, 65536, 1), 32, 0, nullptr}, fill_kernel, out, 1.0f);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  // Above 48 KiB of dynamic shared memory only after cudaFuncSetAttribute; at most 227 KiB.
  const size_t bytes = 64 * 1024;
  launch({1, 64, bytes, nullptr}, big_shared_kernel, out);
  const cudaError_t refused = cudaGetLastError();
  BOOST_TEST(refused == cudaErrorInvalidValue);
  BOOST_TEST(std::string(cudaGetErrorString(refused)).find("cudaFuncSetAttribute") != std::string::npos);
  BOOST_REQUIRE_EQUAL(cudaFuncSetAttribute(reinterpret_cast<const void*>(big_shared_kernel),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                      cudaSuccess);
  launch({1, 64, bytes, nullptr}, big_shared_kernel, out);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  BOOST_TEST(download(out, 64)[5] == 1.0f);
  launch({1, 64, 228 * 1024, nullptr}, big_shared_kernel, out);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  cudaFree(out);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
