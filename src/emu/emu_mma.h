// The register-level tensor-core instructions the attention kernels use (PTX's mma.sync
// m16n8k16 with bf16/fp16 operands and fp32 accumulators, and ldmatrix .x4 with and without
// .trans) on the emulated device. Under nvcc the same functions are inline PTX
// (backend/cuda/cuda_mma.cuh).
//
// Unlike WMMA's, these fragment layouts are documented (PTX ISA, "Matrix Fragments for
// mma.m16n8k16" and "ldmatrix"), so kernels may rely on which lane holds which element, and the
// emulator follows them exactly: with g = lane / 4 and t = lane % 4,
//   - A [16, 16] (row-major, 4 registers of two 16-bit values, the lower column in the low half):
//     a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..);
//   - B [16, 8] (2 registers): b0 = rows 2t..2t+1 of column g, b1 = rows 2t + 8.. of column g;
//   - C/D [16, 8] fp32: d0, d1 = (g, 2t..2t+1), d2, d3 = (g + 8, 2t..2t+1);
//   - ldmatrix .x4: lanes 8i .. 8i + 7 give the addresses of the 8 rows (16 bytes each) of
//     matrix i; register i of lane l gets row g's elements 2t, 2t + 1 of matrix i, or with
//     .trans the elements (2t, g) and (2t + 1, g) (the matrix transposed).
// What is emulated beyond the layouts:
//   - Both are warp-collective: all 32 lanes call them together (else a fault naming the place);
//     neither orders memory after it (no trailing __syncwarp).
//   - ldmatrix reads shared memory only (a row outside the block's shared memory, or not 16-byte
//     aligned, is a fault) and reads the row this lane addresses when the lane arrives: a row
//     another lane wrote without a __syncwarp before is stale, as on a GPU. Its shared-memory
//     wavefronts (bank conflicts) are counted: zt_emu::ldmatrix_wavefronts (emu_device.h).
//   - mma multiplies exactly (a product of two bf16/fp16 values is exact in fp32) and adds in
//     fp32 in k order onto the accumulator, each add rounded to nearest; tensor cores add in an
//     unspecified order and truncate (round toward zero: Fasi et al., "Numerical behavior of
//     NVIDIA tensor cores", 2021), so a GPU may differ in the last bits, which the tests'
//     tolerances allow. ZT_EMU_MMA_ROUNDING=toward-zero sums each 8 products exactly and cuts
//     the result toward zero instead (truncated_dot): the hardware's kind of error, not its bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <string>
#include <type_traits>

#include "emu/emu_device.h"

namespace zt_mma {

namespace detail {

inline int lane() { return zt_emu::this_thread().linear % 32; }

inline float half_to_float(uint16_t bits, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
inline float half_to_float(uint16_t bits, __half) { return __half2float(__ushort_as_half(bits)); }

// Element `half` (0: the low 16 bits) of a register holding two 16-bit values, as fp32.
template <class T>
float element(uint32_t word, int half) {
  return half_to_float(static_cast<uint16_t>(half ? word >> 16 : word & 0xFFFFu), T{});
}

inline void ldmatrix(bool transposed, uint32_t (&r)[4], const void* row, const char* name,
                     const std::source_location& where) {
  const char* file = where.file_name();
  const int line = static_cast<int>(where.line());
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    zt_emu::instruction_fault(name, "the row address is not 16-byte aligned", file, line);
  }
  if (!zt_emu::in_shared_memory(row, 16)) {
    zt_emu::instruction_fault(name, "the row address is not in the block's shared memory", file, line);
  }
  struct Row {
    uint16_t elements[8];  // this lane's row, read when it arrives
    size_t offset;         // its place in shared memory (for the wavefront count)
  };
  static_assert(sizeof(Row) <= zt_emu::kExchangeBytes);
  Row mine;
  std::memcpy(mine.elements, row, sizeof(mine.elements));
  mine.offset = zt_emu::shared_offset(row);
  const unsigned char* lanes = zt_emu::warp_exchange(&mine, sizeof(mine), name, file, line);
  auto row_of = [lanes](int matrix, int row_in_matrix) {
    return reinterpret_cast<const Row*>(lanes + (8 * matrix + row_in_matrix) * zt_emu::kExchangeBytes);
  };
  const int g = lane() / 4, t = lane() % 4;
  for (int i = 0; i < 4; ++i) {
    const uint16_t low = transposed ? row_of(i, 2 * t)->elements[g] : row_of(i, g)->elements[2 * t];
    const uint16_t high = transposed ? row_of(i, 2 * t + 1)->elements[g] : row_of(i, g)->elements[2 * t + 1];
    r[i] = uint32_t{low} | uint32_t{high} << 16;
  }
  if (lane() != 0) return;
  uint64_t wavefronts = 0;  // of the 4 phases, one per matrix
  for (int i = 0; i < 4; ++i) {
    size_t offsets[8];
    for (int j = 0; j < 8; ++j) offsets[j] = row_of(i, j)->offset;
    wavefronts += static_cast<uint64_t>(zt_emu::phase_wavefronts(offsets));
  }
  zt_emu::count_ldmatrix_wavefronts(4, wavefronts);
}

// c + a[0..15] . b[0..15] as tensor cores add it (ZT_EMU_MMA_ROUNDING=toward-zero): the products
// exact, summed onto the accumulator 8 at a time, each block's sum cut to fp32 toward zero (the
// A100's blocks of 8 and truncation, Fasi et al. 2021; the bits of its alignment are not
// modelled). The products of 16-bit values and their sums are exact in double short of a 29-bit
// exponent spread, where what is lost lies below fp32's last bit anyway.
inline float truncated_dot(const float (&a)[16], const float (&b)[16], float c) {
  float accumulator = c;
  for (int block = 0; block < 16; block += 8) {
    double exact = accumulator;
    for (int k = block; k < block + 8; ++k) exact += static_cast<double>(a[k]) * static_cast<double>(b[k]);
    float rounded = static_cast<float>(exact);
    if (std::fabs(static_cast<double>(rounded)) > std::fabs(exact)) rounded = std::nextafter(rounded, 0.0f);
    accumulator = rounded;
  }
  return accumulator;
}

}  // namespace detail

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0, r1, r2, r3}, [row]
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row,
                        const std::source_location where = std::source_location::current()) {
  detail::ldmatrix(false, r, row, "ldmatrix.x4", where);
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {r0, r1, r2, r3}, [row]
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row,
                              const std::source_location where = std::source_location::current()) {
  detail::ldmatrix(true, r, row, "ldmatrix.x4.trans", where);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d += a b over the warp. The
// lanes exchange their operand registers (zt_emu::warp_exchange), and each computes its own 4
// elements of d.
template <class T>
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                  const std::source_location where = std::source_location::current()) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "emulated mma: bf16 or fp16 operands");
  struct Operands {
    uint32_t a[4];
    uint32_t b[2];
  };
  const Operands mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  const unsigned char* lanes = zt_emu::warp_exchange(&mine, sizeof(mine), "mma.m16n8k16",
                                                     where.file_name(), static_cast<int>(where.line()));
  auto operands = [lanes](int lane) {
    return reinterpret_cast<const Operands*>(lanes + lane * zt_emu::kExchangeBytes);
  };
  const int g = detail::lane() / 4, t = detail::lane() % 4;
  // A(row, k) is lane 4 (row % 8) + (k % 8) / 2's register (row >= 8) + 2 (k >= 8), half k % 2;
  // B(k, col) is lane 4 col + (k % 8) / 2's register (k >= 8), half k % 2.
  float a_rows[2][16], b_cols[2][16];
  for (int k = 0; k < 16; ++k) {
    const int source = (k % 8) / 2, high_k = k >= 8, half = k % 2;
    for (int h = 0; h < 2; ++h) {
      a_rows[h][k] = detail::element<T>(operands(4 * g + source)->a[h + 2 * high_k], half);
      b_cols[h][k] = detail::element<T>(operands(4 * (2 * t + h) + source)->b[high_k], half);
    }
  }
  if (zt_emu::mma_rounds_toward_zero()) {
    for (int i = 0; i < 4; ++i) d[i] = detail::truncated_dot(a_rows[i / 2], b_cols[i % 2], d[i]);
  } else {
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 16; ++k) d[i] = std::fma(a_rows[i / 2][k], b_cols[i % 2][k], d[i]);
    }
  }
  if (detail::lane() == 0) zt_emu::count_mma_operation();
}

}  // namespace zt_mma
