// The emulated warp matrix functions (src/emu/emu_wmma.h): d = a b + c on 16x16x16 tiles of
// bf16 and fp16 with every operand layout, accumulators loaded and stored in both memory
// layouts, a uniform element-wise operation on an accumulator, and several warps of one block
// each doing their own tile. Checked bit for bit against a host loop that multiplies and adds
// in the emulator's documented order (fp32 fma over k); misuse is in emu_negative.cpp.
#include "emu/emu_predefine.h"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_wmma.cuh"

namespace {

using zt::cuda::launch;
namespace wmma = nvcuda::wmma;

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* pointer = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(&pointer, host.size() * sizeof(T)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(pointer, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                      cudaSuccess);
  return static_cast<T*>(pointer);
}

inline float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }
inline float to_float(__half value) { return __half2float(value); }
template <class T>
T from_float(float value) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(value);
  } else {
    return __float2bfloat16_rn(value);
  }
}

// Warp w of the block: out tile w = alpha * (a_w b_w) + c_w, where a_w, b_w, c_w, out_w are the
// w-th 16x16 tiles (leading dimension 24 for a and b, 20 for c and out: padded, as kernels do).
template <class T, class LayoutA, class LayoutB>
__global__ void mma_kernel(float* out, const T* a, const T* b, const float* c, float alpha,
                           bool c_col_major) {
  const int warp = threadIdx.x / 32;
  constexpr int kOperandLd = 24, kAccumulatorLd = 20, kOperandTile = 16 * kOperandLd;
  constexpr int kAccumulatorTile = 16 * kAccumulatorLd;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> a_tile;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> b_tile;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> sum, previous;
  wmma::fill_fragment(sum, 0.0f);
  wmma::load_matrix_sync(a_tile, a + warp * kOperandTile, kOperandLd);
  wmma::load_matrix_sync(b_tile, b + warp * kOperandTile, kOperandLd);
  wmma::mma_sync(sum, a_tile, b_tile, sum);
  for (int i = 0; i < sum.num_elements; ++i) sum.x[i] *= alpha;
  const wmma::layout_t c_layout = c_col_major ? wmma::mem_col_major : wmma::mem_row_major;
  wmma::load_matrix_sync(previous, c + warp * kAccumulatorTile, kAccumulatorLd, c_layout);
  for (int i = 0; i < sum.num_elements; ++i) sum.x[i] += previous.x[i];
  wmma::store_matrix_sync(out + warp * kAccumulatorTile, sum, kAccumulatorLd, c_layout);
}

template <class T, class LayoutA, class LayoutB>
void check_mma(bool a_col_major, bool b_col_major, bool c_col_major, uint32_t seed) {
  constexpr int kWarps = 3, kOperandLd = 24, kAccumulatorLd = 20;
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<T> a(kWarps * 16 * kOperandLd), b(a.size());
  std::vector<float> c(kWarps * 16 * kAccumulatorLd);
  for (T& value : a) value = from_float<T>(uniform(random));
  for (T& value : b) value = from_float<T>(uniform(random));
  for (float& value : c) value = uniform(random);
  const float alpha = 0.375f;
  float* out = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&out), c.size() * sizeof(float)), cudaSuccess);
  launch({1, 32 * kWarps, 0, nullptr}, mma_kernel<T, LayoutA, LayoutB>, out, device_copy(a),
         device_copy(b), device_copy(c), alpha, c_col_major);
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> result(c.size());
  BOOST_REQUIRE_EQUAL(cudaMemcpy(result.data(), out, c.size() * sizeof(float), cudaMemcpyDeviceToHost),
                      cudaSuccess);
  // (row, col) of a tile in memory with leading dimension ld.
  auto at = [](bool col_major, int row, int col, int ld) { return col_major ? col * ld + row : row * ld + col; };
  for (int w = 0; w < kWarps; ++w) {
    for (int row = 0; row < 16; ++row) {
      for (int col = 0; col < 16; ++col) {
        float product = 0.0f;
        for (int k = 0; k < 16; ++k) {
          product = std::fma(to_float(a[w * 16 * kOperandLd + at(a_col_major, row, k, kOperandLd)]),
                             to_float(b[w * 16 * kOperandLd + at(b_col_major, k, col, kOperandLd)]),
                             product);
        }
        const int place = w * 16 * kAccumulatorLd + at(c_col_major, row, col, kAccumulatorLd);
        const float expected = product * alpha + c[place];
        if (result[place] != expected) {
          BOOST_ERROR("warp " << w << " (" << row << ", " << col << "): " << result[place]
                              << ", expected " << expected);
          return;
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE(emu_wmma)

BOOST_AUTO_TEST_CASE(bf16_products_in_every_layout) {
  check_mma<__nv_bfloat16, wmma::row_major, wmma::row_major>(false, false, false, 1);
  check_mma<__nv_bfloat16, wmma::col_major, wmma::row_major>(true, false, true, 2);
  check_mma<__nv_bfloat16, wmma::row_major, wmma::col_major>(false, true, false, 3);
  check_mma<__nv_bfloat16, wmma::col_major, wmma::col_major>(true, true, true, 4);
}

BOOST_AUTO_TEST_CASE(fp16_products_in_every_layout) {
  check_mma<__half, wmma::row_major, wmma::row_major>(false, false, true, 5);
  check_mma<__half, wmma::col_major, wmma::col_major>(true, true, false, 6);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
