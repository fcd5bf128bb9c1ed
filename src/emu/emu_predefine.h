// Force-included (g++ -include) first into every CUDA source compiled as host C++ for the
// emulated device (-DZT_CUDA=EMULATE or the gpu-emu test targets). The real CUDA headers are
// used for types and declarations; defining the execution-space keywords before they are read
// keeps them from defining their nvcc meanings. Then the kernels' built-ins (emu_device.h).
#pragma once

#define ZT_CUDA_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
// Shared memory is declared with ZT_SHARED / ZT_DYNAMIC_SHARED (backend/cuda/cuda_launch.h),
// which the emulator can give per-block storage: a plain __shared__ would silently be a local.
#define __shared__ __shared__is_not_emulated_use_ZT_SHARED_or_ZT_DYNAMIC_SHARED

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "emu/emu_device.h"
