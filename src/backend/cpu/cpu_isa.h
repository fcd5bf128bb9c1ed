// The instruction-set paths of the CPU kernels that are compiled for several ISAs and chosen at
// run time (the GPU build is packed without -march=native: it must run on any x86-64 node and
// still use the node's AVX-512 or AVX2). Today: cpu_adamw (backend/cpu/cpu_adam.h).
#pragma once

namespace zt {

// The paths, from the most portable: generic is what the build's flags give (SSE2 on a
// portable x86-64 build), avx2 and avx512 are compiled for those ISAs whatever the flags.
enum class CpuIsa { generic, avx2, avx512 };

// What this CPU can run (AVX-512 here means F, VL, BW and DQ: the x86-64-v4 subset).
struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
};

CpuFeatures cpu_features();  // of the CPU this process runs on
bool cpu_supports(CpuIsa isa, const CpuFeatures& features);
const char* cpu_isa_name(CpuIsa isa);

// The path for a forced name (ZT_CPU_ISA: "avx512", "avx2" or "generic"), or the best path of
// `features` when `forced` is null or empty. An unknown name, or a path the CPU cannot run,
// is an error naming it and what the CPU has.
CpuIsa choose_cpu_isa(const char* forced, const CpuFeatures& features);

// choose_cpu_isa(getenv("ZT_CPU_ISA"), cpu_features()), decided once per process.
CpuIsa cpu_isa();

}  // namespace zt
