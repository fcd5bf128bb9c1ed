// The warp matrix functions (nvcuda::wmma: tensor-core tiles of 16x16x16): CUDA's <mma.h>
// under nvcc, their emulation (emu/emu_wmma.h) when the kernels run on the emulated device.
#pragma once
#if defined(ZT_CUDA_EMULATE)
#include "emu/emu_wmma.h"
#else
#include <mma.h>
#endif
