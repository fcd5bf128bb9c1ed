// Tensor cores at the register level: PTX's mma.sync m16n8k16 (bf16/fp16 operands, fp32
// accumulators) and ldmatrix .x4 (four 8x8 16-bit matrices from shared memory, plain or
// transposed), whose fragment layouts the PTX ISA documents (emu/emu_mma.h lists them). Knowing
// which lane holds which element lets a kernel keep scores and probabilities in registers and
// feed an accumulator straight back in as the next product's A operand, as FlashAttention-2
// does; WMMA leaves that mapping unspecified. Inline PTX under nvcc (sm_80 and later), the
// emulation on the emulated device.
//   zt_mma::ldmatrix_x4(r, row);           // lane l gives row (l % 8) of matrix l / 8
//   zt_mma::ldmatrix_x4_trans(r, row);
//   zt_mma::mma_m16n8k16<__nv_bfloat16>(d, a, b0, b1);  // d[4] += a[4] (16x16) b0,b1 (16x8)
#pragma once
#include <cstdint>

#if defined(ZT_CUDA_EMULATE)
#include "emu/emu_mma.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace zt_mma {

// The ldmatrix calls read shared memory that plain stores wrote: the "memory" clobber keeps the
// compiler from moving those stores (or later ones) across them.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

template <class T>
__device__ inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "mma m16n8k16: bf16 or fp16 operands");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace zt_mma
#endif
