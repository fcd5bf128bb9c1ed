// The warp matrix functions (CUDA's nvcuda::wmma, <mma.h>) on the emulated device, for the
// shape the kernels use: m16n16k16 with bf16 or fp16 operands and fp32 accumulators.
//
// What a GPU guarantees and what is emulated:
//   - A fragment's elements are spread over the 32 lanes in an order CUDA leaves unspecified;
//     here lane l holds the 8 elements l*8 .. l*8+7 of the 16x16 tile in row-major order. A
//     kernel may only apply the same operation to every element (x[i] *= alpha, x[i] += y[i]
//     between fragments of one type), which is all the attention kernels do.
//   - load/store/mma are warp-collective: all 32 lanes must call them together (a lane that is
//     elsewhere, or has exited, is a fault naming the place, as for a shuffle). None of them
//     orders memory between lanes: a load reads this lane's elements when the lane arrives, so
//     elements another lane wrote without a __syncwarp before are stale (and a race for
//     ThreadSanitizer). A store meets the lanes first (its convergence check) and then writes
//     each lane's elements as that lane goes on, so a read of another lane's stored elements
//     without __syncwarp is stale too; what it cannot show is the other direction: plain reads
//     of the destination by other lanes before the store have all run when the lanes meet.
//   - ldm must be a multiple of 8 elements for 16-bit types and of 4 for float, and the pointer
//     256-bit (32-byte) aligned; anything else is undefined on a GPU and a fault here.
//   - mma_sync multiplies exactly (a product of two bf16/fp16 values is exact in fp32) and adds
//     in fp32 in k order; tensor cores add in an unspecified order, so results may differ from a
//     GPU's in the last bits, which the tests' tolerances allow.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "emu/emu_device.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulated WMMA has the m16n16k16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : (std::is_same_v<T, __nv_bfloat16> ||
                                                    std::is_same_v<T, __half>),
                "emulated WMMA: bf16/fp16 operands, fp32 accumulators");

 public:
  using element_type = T;
  static constexpr int num_elements = 8;  // 256 elements over 32 lanes
  T x[num_elements];
};

namespace detail {

constexpr int kTile = 16;
constexpr int kPerLane = 8;

inline int lane() { return zt_emu::this_thread().linear % 32; }

inline float to_float(float value) { return value; }
inline float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }
inline float to_float(__half value) { return __half2float(value); }

template <class T>
void check_ldm_and_alignment(const char* op, const void* pointer, unsigned ldm, const char* file,
                             int line) {
  constexpr unsigned multiple = sizeof(T) == 2 ? 8 : 4;
  if (ldm % multiple != 0 || ldm < kTile) {
    zt_emu::wmma_fault(op, "ldm " + std::to_string(ldm) + " is not a multiple of " +
                               std::to_string(multiple) + " elements of at least 16",
                       file, line);
  }
  if (reinterpret_cast<uintptr_t>(pointer) % 32 != 0) {
    zt_emu::wmma_fault(op, "the pointer is not 256-bit (32-byte) aligned", file, line);
  }
}

// The offset of element (row, col) of a 16x16 tile stored with leading dimension ldm.
inline size_t offset(bool row_major_layout, int row, int col, unsigned ldm) {
  return row_major_layout ? size_t(row) * ldm + size_t(col) : size_t(col) * ldm + size_t(row);
}

// This lane's elements of a tile in memory (a warp-collective load: every lane checks in).
template <class T>
void load(const char* op, T (&x)[kPerLane], const T* pointer, unsigned ldm, bool row_major_layout,
          const char* file, int line) {
  check_ldm_and_alignment<T>(op, pointer, ldm, file, line);
  // Read when this lane arrives, before the lanes meet: the load is warp-collective but implies
  // no __syncwarp, so what another lane wrote without one (it may not have run yet) is not
  // seen, as on a GPU whose lanes were not converged by the program.
  const int first = lane() * kPerLane;
  for (int i = 0; i < kPerLane; ++i) {
    const int element = first + i;
    x[i] = pointer[offset(row_major_layout, element / kTile, element % kTile, ldm)];
  }
  zt_emu::sync_warp(file, line);  // the convergence check: every lane calls it together
}

template <class Layout>
constexpr bool is_row_major() {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "an operand fragment needs its layout (row_major or col_major)");
  return std::is_same_v<Layout, row_major>;
}

}  // namespace detail

template <class Use, class T, class Layout>
void load_matrix_sync_at(const char* file, int line, fragment<Use, 16, 16, 16, T, Layout>& a,
                         const T* pointer, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its layout_t");
  detail::load("load_matrix_sync", a.x, pointer, ldm, detail::is_row_major<Layout>(), file, line);
}

inline void load_matrix_sync_at(const char* file, int line,
                                fragment<accumulator, 16, 16, 16, float>& c, const float* pointer,
                                unsigned ldm, layout_t layout) {
  detail::load("load_matrix_sync", c.x, pointer, ldm, layout == mem_row_major, file, line);
}

inline void store_matrix_sync_at(const char* file, int line, float* pointer,
                                 const fragment<accumulator, 16, 16, 16, float>& c, unsigned ldm,
                                 layout_t layout) {
  detail::check_ldm_and_alignment<float>("store_matrix_sync", pointer, ldm, file, line);
  zt_emu::sync_warp(file, line);
  const int first = detail::lane() * detail::kPerLane;
  for (int i = 0; i < detail::kPerLane; ++i) {
    const int element = first + i;
    pointer[detail::offset(layout == mem_row_major, element / detail::kTile,
                           element % detail::kTile, ldm)] = c.x[i];
  }
}

template <class Use, class T, class Layout>
void fill_fragment_at(const char*, int, fragment<Use, 16, 16, 16, T, Layout>& f, T value) {
  for (T& element : f.x) element = value;
}

// d = a b + c over the warp: the lanes exchange where their fragments are (one gather), each
// computes its own 8 elements of d, and a __syncwarp keeps every fragment alive until all
// lanes have read it.
template <class T, class LayoutA, class LayoutB>
void mma_sync_at(const char* file, int line, fragment<accumulator, 16, 16, 16, float>& d,
                 const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
                 const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
                 const fragment<accumulator, 16, 16, 16, float>& c) {
  using detail::kPerLane;
  using detail::kTile;
  struct Operands {
    const T* a;
    const T* b;
  };
  const Operands mine{a.x, b.x};
  const uint64_t* lanes =
      zt_emu::warp_gather(reinterpret_cast<uint64_t>(&mine), "mma_sync", file, line);
  // Element e of a tile is lane e / 8's x[e % 8] (the layout's order is that of the row-major
  // tile, see the top of this file): this lane's 8 outputs are row lane / 2, columns
  // 8 (lane % 2) .. + 7; row r of A is lanes 2r and 2r + 1, row k of B's 8 columns is lane
  // 2k + lane % 2.
  const int row = detail::lane() / 2, half = detail::lane() % 2;
  float a_row[kTile];
  for (int k = 0; k < kTile; ++k) {
    a_row[k] = detail::to_float(reinterpret_cast<const Operands*>(lanes[2 * row + k / kPerLane])->a[k % kPerLane]);
  }
  float result[kPerLane];
  for (int i = 0; i < kPerLane; ++i) result[i] = c.x[i];
  for (int k = 0; k < kTile; ++k) {  // each output's sum in k order
    const T* b_row = reinterpret_cast<const Operands*>(lanes[2 * k + half])->b;
    for (int i = 0; i < kPerLane; ++i) result[i] = std::fma(a_row[k], detail::to_float(b_row[i]), result[i]);
  }
  if (detail::lane() == 0) zt_emu::count_wmma_operation();
  zt_emu::sync_warp(file, line);
  for (int i = 0; i < kPerLane; ++i) d.x[i] = result[i];
}

}  // namespace nvcuda::wmma

// The call sites' file:line reach the emulator's faults.
#define load_matrix_sync(...) load_matrix_sync_at(__FILE__, __LINE__, __VA_ARGS__)
#define store_matrix_sync(...) store_matrix_sync_at(__FILE__, __LINE__, __VA_ARGS__)
#define fill_fragment(...) fill_fragment_at(__FILE__, __LINE__, __VA_ARGS__)
#define mma_sync(...) mma_sync_at(__FILE__, __LINE__, __VA_ARGS__)
