// Kernel launches and shared-memory declarations, written once for both builds of the CUDA
// sources: nvcc (a triple-chevron launch, __shared__) and the emulated device (ZT_CUDA_EMULATE:
// the same kernels compiled as host C++ and run on the CPU with a GPU's checks; src/emu), which
// needs to see every launch and every shared array.
//   launch({grid, block, shared_bytes, stream}, kernel<Format>, args...);
//   ZT_SHARED(float, scratch, [32]);          // __shared__ float scratch[32];
//   ZT_DYNAMIC_SHARED(float, shared);         // extern __shared__ float shared[];
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <source_location>
#include <utility>

namespace zt::cuda {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
  std::source_location where;  // the launch's file:line, for the emulator's messages

  LaunchConfig(dim3 grid_, dim3 block_, size_t shared_bytes_, cudaStream_t stream_,
               std::source_location where_ = std::source_location::current())
      : grid(grid_), block(block_), shared_bytes(shared_bytes_), stream(stream_), where(where_) {}
};

// kernel<<<config.grid, config.block, config.shared_bytes, config.stream>>>(args...). A bad
// configuration is reported by cudaGetLastError, as for the triple chevrons (ZT_CUDA_CHECK_LAUNCH).
template <class... Params, class... Args>
void launch(const LaunchConfig& config, void (*kernel)(Params...), Args&&... args) {
#if ZT_CUDA_EMULATE
  ::zt_emu::launch(config.grid, config.block, config.shared_bytes, config.stream,
                   {config.where.file_name(), config.where.line()}, kernel,
                   std::forward<Args>(args)...);
#else
  kernel<<<config.grid, config.block, config.shared_bytes, config.stream>>>(
      std::forward<Args>(args)...);
#endif
}

}  // namespace zt::cuda

#if ZT_CUDA_EMULATE
// One array per block and declaration: `declaration` (a static local) tells the declarations
// apart, also between instantiations of a kernel template.
#define ZT_SHARED(type, name, dims)                                                         \
  static const char zt_shared_declaration_##name = 0;                                       \
  using zt_shared_type_##name = type dims;                                                  \
  zt_shared_type_##name& name = *static_cast<zt_shared_type_##name*>(                       \
      ::zt_emu::static_shared_memory(sizeof(zt_shared_type_##name),                         \
                                     alignof(zt_shared_type_##name),                        \
                                     &zt_shared_declaration_##name, #name, __FILE__, __LINE__))
#define ZT_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::zt_emu::dynamic_shared_memory())
#else
#define ZT_SHARED(type, name, dims) __shared__ type name dims
#define ZT_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
