// The emulated register-level tensor-core instructions and asynchronous copies (src/emu/emu_mma.h,
// emu_device.h): ldmatrix .x4 plain and transposed against the PTX ISA's fragment layout,
// mma.sync m16n8k16 in bf16 and fp16 against a host loop that multiplies and adds in the
// emulator's documented order (fp32 fma over k, bit for bit), the two composed as the attention
// kernels compose them (A from ldmatrix, B from ldmatrix .trans), and cp.async copies done at
// their group's wait. Misuse is in emu_negative.cpp.
#include "emu/emu_predefine.h"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_async_copy.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_mma.cuh"

namespace {

using zt::cuda::launch;

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* pointer = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(&pointer, host.size() * sizeof(T)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(pointer, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                      cudaSuccess);
  return static_cast<T*>(pointer);
}

template <class T>
std::vector<T> run_and_download(T* device, size_t count) {
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<T> host(count);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
                      cudaSuccess);
  return host;
}

constexpr int kLd = 24;  // a [16, 16] 16-bit tile's padded leading dimension, as kernels use

struct alignas(16) SharedTile {
  uint16_t element[16 * kLd];
};

// out[lane][i] (plain) and out[32 + lane][i] (.trans): register i of each lane after ldmatrix .x4
// of a [16, 16] tile (global `tile`, copied to shared memory), where lane l addresses row
// l % 8 of matrix l / 8, and matrix m is rows 8 (m % 2) .. + 7, columns 8 (m / 2) .. + 7.
__global__ void ldmatrix_kernel(uint32_t* out, const uint16_t* tile) {
  ZT_SHARED(SharedTile, shared, [1]);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 16 * kLd; e += 32) shared[0].element[e] = tile[e];
  __syncwarp();
  const int matrix = lane / 8;
  const uint16_t* row = shared[0].element + (8 * (matrix % 2) + lane % 8) * kLd + 8 * (matrix / 2);
  uint32_t plain[4], transposed[4];
  zt_mma::ldmatrix_x4(plain, row);
  zt_mma::ldmatrix_x4_trans(transposed, row);
  for (int i = 0; i < 4; ++i) {
    out[lane * 4 + i] = plain[i];
    out[(32 + lane) * 4 + i] = transposed[i];
  }
}

template <int kStride>
struct alignas(16) StridedTile {
  uint16_t element[16 * kStride];
};

// One ldmatrix .x4 of a [16, 16] tile whose rows lie kStride elements apart in shared memory.
template <int kStride>
__global__ void strided_ldmatrix_kernel(uint32_t* out) {
  ZT_SHARED(StridedTile<kStride>, shared, [1]);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 16 * kStride; e += 32) shared[0].element[e] = static_cast<uint16_t>(e);
  __syncwarp();
  const int matrix = lane / 8;
  uint32_t r[4];
  zt_mma::ldmatrix_x4(r, shared[0].element + (8 * (matrix % 2) + lane % 8) * kStride + 8 * (matrix / 2));
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

struct Wavefronts {
  uint64_t phases, wavefronts;
};

template <int kStride>
Wavefronts wavefronts_of_strided_ldmatrix() {
  uint32_t* out = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&out), 32 * 4 * sizeof(uint32_t)), cudaSuccess);
  const Wavefronts before{zt_emu::ldmatrix_phases(), zt_emu::ldmatrix_wavefronts()};
  launch({1, 32, 0, nullptr}, strided_ldmatrix_kernel<kStride>, out);
  run_and_download(out, 32 * 4);
  BOOST_REQUIRE_EQUAL(cudaFree(out), cudaSuccess);
  return {zt_emu::ldmatrix_phases() - before.phases, zt_emu::ldmatrix_wavefronts() - before.wavefronts};
}

BOOST_AUTO_TEST_SUITE(emu_mma)

// A phase is 8 rows of 16 bytes; banks are 4 bytes, 32 of them (128 bytes a wavefront).
BOOST_AUTO_TEST_CASE(ldmatrix_wavefronts_count_bank_conflicts) {
  auto phase = [](size_t first, size_t row_bytes) {
    size_t offsets[8];
    for (size_t j = 0; j < 8; ++j) offsets[j] = first + j * row_bytes;
    return zt_emu::phase_wavefronts(offsets);
  };
  BOOST_TEST(phase(0, 16) == 1);     // 128 consecutive bytes
  BOOST_TEST(phase(256, 48) == 1);   // rows of 24 16-bit elements: 12 banks apart
  BOOST_TEST(phase(0, 144) == 1);    // D 64 + 8 (operand_ld): 4 banks apart
  BOOST_TEST(phase(0, 128) == 8);    // unpadded 64-element rows: every row in banks 0-3
  BOOST_TEST(phase(0, 256) == 8);    // unpadded D 128
  BOOST_TEST(phase(0, 64) == 4);     // 32-element rows: rows 0, 2, 4, 6 all in banks 0-3
  BOOST_TEST(phase(32, 0) == 1);     // one row for all 8 addresses: a broadcast
  const size_t two_rows_one_bank[8] = {0, 128, 16, 32, 48, 64, 80, 96};
  BOOST_TEST(zt_emu::phase_wavefronts(two_rows_one_bank) == 2);

  // Counted per ldmatrix .x4 (4 phases) by lane 0, from the rows the 32 lanes address.
  const Wavefronts padded = wavefronts_of_strided_ldmatrix<24>();
  BOOST_TEST(padded.phases == 4u);
  BOOST_TEST(padded.wavefronts == 4u);
  const Wavefronts unpadded = wavefronts_of_strided_ldmatrix<64>();
  BOOST_TEST(unpadded.phases == 4u);
  BOOST_TEST(unpadded.wavefronts == 32u);
}

BOOST_AUTO_TEST_CASE(ldmatrix_follows_the_ptx_layout) {
  std::vector<uint16_t> tile(16 * kLd);
  for (size_t e = 0; e < tile.size(); ++e) tile[e] = static_cast<uint16_t>(e);  // its own index
  uint32_t* out = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&out), 64 * 4 * sizeof(uint32_t)), cudaSuccess);
  launch({1, 32, 0, nullptr}, ldmatrix_kernel, out, device_copy(tile));
  const std::vector<uint32_t> got = run_and_download(out, 64 * 4);
  // Element (r, c) of matrix m, as stored.
  auto at = [&](int m, int r, int c) -> uint32_t { return tile[(8 * (m % 2) + r) * kLd + 8 * (m / 2) + c]; };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int m = 0; m < 4; ++m) {
      const uint32_t plain = at(m, g, 2 * t) | at(m, g, 2 * t + 1) << 16;
      const uint32_t transposed = at(m, 2 * t, g) | at(m, 2 * t + 1, g) << 16;
      BOOST_TEST(got[lane * 4 + m] == plain, "lane " << lane << " register " << m);
      BOOST_TEST(got[(32 + lane) * 4 + m] == transposed, "lane " << lane << " register " << m << " .trans");
    }
  }
}

inline float to_float(uint16_t bits, __nv_bfloat16) { return __bfloat162float(__ushort_as_bfloat16(bits)); }
inline float to_float(uint16_t bits, __half) { return __half2float(__ushort_as_half(bits)); }
inline uint16_t from_float(float value, __nv_bfloat16) { return __bfloat16_as_ushort(__float2bfloat16_rn(value)); }
inline uint16_t from_float(float value, __half) { return __half_as_ushort(__float2half_rn(value)); }

// d [16, 8] = c + a [16, 16] b [16, 8] (all row-major in global memory), each lane building its
// registers from the documented layout (g = lane / 4, t = lane % 4).
template <class T>
__global__ void mma_kernel(float* d, const uint16_t* a, const uint16_t* b, const float* c) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  auto pair = [](const uint16_t* p, int second_offset) {
    return uint32_t{p[0]} | uint32_t{p[second_offset]} << 16;
  };
  const uint32_t a_regs[4] = {pair(a + g * 16 + 2 * t, 1), pair(a + (g + 8) * 16 + 2 * t, 1),
                              pair(a + g * 16 + 2 * t + 8, 1), pair(a + (g + 8) * 16 + 2 * t + 8, 1)};
  const uint32_t b0 = pair(b + (2 * t) * 8 + g, 8), b1 = pair(b + (2 * t + 8) * 8 + g, 8);
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  zt_mma::mma_m16n8k16<T>(acc, a_regs, b0, b1);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

template <class T>
void check_mma(uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> c(16 * 8);
  for (uint16_t& value : a) value = from_float(uniform(random), T{});
  for (uint16_t& value : b) value = from_float(uniform(random), T{});
  for (float& value : c) value = uniform(random);
  float* d = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&d), c.size() * sizeof(float)), cudaSuccess);
  launch({1, 32, 0, nullptr}, mma_kernel<T>, d, device_copy(a), device_copy(b), device_copy(c));
  const std::vector<float> got = run_and_download(d, c.size());
  for (int row = 0; row < 16; ++row) {
    for (int col = 0; col < 8; ++col) {
      float expected = c[row * 8 + col];
      for (int k = 0; k < 16; ++k) {
        expected = std::fma(to_float(a[row * 16 + k], T{}), to_float(b[k * 8 + col], T{}), expected);
      }
      BOOST_TEST(got[row * 8 + col] == expected, "(" << row << ", " << col << ")");
    }
  }
}

BOOST_AUTO_TEST_CASE(mma_bf16_and_fp16_follow_the_ptx_layout) {
  check_mma<__nv_bfloat16>(1);
  check_mma<__half>(2);
}

// d [16, 8] = a [16, 16] b [16, 8] with a and b row-major in shared memory (padded), a loaded with
// ldmatrix, b with ldmatrix .trans, as the attention kernels load Q and V: lanes 0-15 address a's
// rows at column 0, lanes 16-31 at column 8; for b lanes 0-7 and 8-15 address rows 0-7 and 8-15
// (matrices 2, 3 repeat them; only registers 0, 1 are used).
__global__ void composed_kernel(float* d, const uint16_t* a, const uint16_t* b) {
  ZT_SHARED(SharedTile, shared, [2]);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 16 * 16; e += 32) shared[0].element[e / 16 * kLd + e % 16] = a[e];
  for (int e = lane; e < 16 * 8; e += 32) shared[1].element[e / 8 * kLd + e % 8] = b[e];
  __syncwarp();
  uint32_t a_regs[4], b_regs[4];
  zt_mma::ldmatrix_x4(a_regs, shared[0].element + (lane % 16) * kLd + (lane / 16) * 8);
  zt_mma::ldmatrix_x4_trans(b_regs, shared[1].element + (lane % 16) * kLd);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  zt_mma::mma_m16n8k16<__nv_bfloat16>(acc, a_regs, b_regs[0], b_regs[1]);
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) d[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = acc[e];
}

// ZT_EMU_MMA_ROUNDING=toward-zero's sum: 8 products at a time exactly, each block cut toward zero.
BOOST_AUTO_TEST_CASE(truncated_dot_cuts_each_block_of_8_toward_zero) {
  const float ulp = std::ldexp(1.0f, -23);  // fp32's at 1
  float a[16] = {}, b[16] = {};
  for (float& value : b) value = 1.0f;
  a[0] = 0.75f * ulp;  // 1 + 0.75 ulp: to nearest 1 + ulp, toward zero 1
  BOOST_TEST(std::fma(a[0], b[0], 1.0f) == 1.0f + ulp);
  BOOST_TEST(zt_mma::detail::truncated_dot(a, b, 1.0f) == 1.0f);
  b[0] = -1.0f;  // -(1 + 0.75 ulp): to nearest -(1 + ulp), toward zero -1
  BOOST_TEST(std::fma(a[0], b[0], -1.0f) == -1.0f - ulp);
  BOOST_TEST(zt_mma::detail::truncated_dot(a, b, -1.0f) == -1.0f);
  b[0] = 1.0f;
  a[1] = 0.25f * ulp;  // the block's products summed exactly first: 1 + ulp, exact
  BOOST_TEST(zt_mma::detail::truncated_dot(a, b, 1.0f) == 1.0f + ulp);
  a[1] = 0.0f;
  a[8] = 0.25f * ulp;  // the same product in the next block: each block cut on its own
  BOOST_TEST(zt_mma::detail::truncated_dot(a, b, 1.0f) == 1.0f);
}

BOOST_AUTO_TEST_CASE(ldmatrix_operands_compose_with_mma) {
  std::mt19937 random(3);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  for (uint16_t& value : a) value = from_float(uniform(random), __nv_bfloat16{});
  for (uint16_t& value : b) value = from_float(uniform(random), __nv_bfloat16{});
  float* d = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&d), 16 * 8 * sizeof(float)), cudaSuccess);
  launch({1, 32, 0, nullptr}, composed_kernel, d, device_copy(a), device_copy(b));
  const std::vector<float> got = run_and_download(d, 16 * 8);
  for (int row = 0; row < 16; ++row) {
    for (int col = 0; col < 8; ++col) {
      float expected = 0.0f;
      for (int k = 0; k < 16; ++k) {
        expected = std::fma(to_float(a[row * 16 + k], __nv_bfloat16{}), to_float(b[k * 8 + col], __nv_bfloat16{}),
                            expected);
      }
      BOOST_TEST(got[row * 8 + col] == expected, "(" << row << ", " << col << ")");
    }
  }
}

struct alignas(16) SharedFloats {
  float element[2 * 128];
};

// 32 threads each copy 16 bytes of two 128-float rows with cp.async in two groups; out[0 ..] is
// what thread 0 reads of its own first copy before any wait, out[1 ..] after wait_group 1 (the
// first group done, the second not), out[2 ..] after wait_group 0 (both).
__global__ void async_copy_kernel(float* out, const float* source) {
  ZT_SHARED(SharedFloats, shared, [1]);
  float* tile = shared[0].element;
  const int lane = static_cast<int>(threadIdx.x);
  zt::cuda::async_copy_16(tile + 4 * lane, source + 4 * lane);
  zt::cuda::async_copy_commit();
  zt::cuda::async_copy_16(tile + 128 + 4 * lane, source + 128 + 4 * lane);
  zt::cuda::async_copy_commit();
  out[lane * 6 + 0] = tile[4 * lane];
  out[lane * 6 + 1] = tile[128 + 4 * lane];
  zt::cuda::async_copy_wait<1>();
  out[lane * 6 + 2] = tile[4 * lane];
  out[lane * 6 + 3] = tile[128 + 4 * lane];
  zt::cuda::async_copy_wait<0>();
  out[lane * 6 + 4] = tile[4 * lane];
  out[lane * 6 + 5] = tile[128 + 4 * lane];
}

BOOST_AUTO_TEST_CASE(async_copies_are_done_at_their_groups_wait) {
  std::vector<float> source(256);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i);
  float* out = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&out), 32 * 6 * sizeof(float)), cudaSuccess);
  launch({1, 32, 0, nullptr}, async_copy_kernel, out, device_copy(source));
  const std::vector<float> got = run_and_download(out, 32 * 6);
  for (int lane = 0; lane < 32; ++lane) {
    const float first = static_cast<float>(4 * lane), second = static_cast<float>(128 + 4 * lane);
    // Not yet copied: shared memory's poison (0xFF bytes: NaN).
    BOOST_TEST(std::isnan(got[lane * 6 + 0]), "lane " << lane << " before any wait");
    BOOST_TEST(std::isnan(got[lane * 6 + 1]), "lane " << lane << " before any wait");
    BOOST_TEST(got[lane * 6 + 2] == first, "lane " << lane << " after wait_group 1");
    BOOST_TEST(std::isnan(got[lane * 6 + 3]), "lane " << lane << " after wait_group 1: the last group pending");
    BOOST_TEST(got[lane * 6 + 4] == first, "lane " << lane << " after wait_group 0");
    BOOST_TEST(got[lane * 6 + 5] == second, "lane " << lane << " after wait_group 0");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
