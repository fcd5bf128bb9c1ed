// cpu_isa (see cpu_isa.h): feature detection with GCC's __builtin_cpu_supports, and the
// choice of a path, forced by ZT_CPU_ISA for tests and benchmarks.
#include "backend/cpu/cpu_isa.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace zt {

CpuFeatures cpu_features() {
  CpuFeatures features;
#if defined(__x86_64__)
  __builtin_cpu_init();
  features.avx2 = __builtin_cpu_supports("avx2");
  features.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#endif
  return features;
}

bool cpu_supports(CpuIsa isa, const CpuFeatures& features) {
  switch (isa) {
    case CpuIsa::generic: return true;
    case CpuIsa::avx2: return features.avx2;
    case CpuIsa::avx512: return features.avx512;
  }
  return false;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic: return "generic";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

namespace {

std::string supported_names(const CpuFeatures& features) {
  std::string names = "generic";
  if (features.avx2) names += ", avx2";
  if (features.avx512) names += ", avx512";
  return names;
}

}  // namespace

CpuIsa choose_cpu_isa(const char* forced, const CpuFeatures& features) {
  if (forced == nullptr || *forced == '\0') {
    if (features.avx512) return CpuIsa::avx512;
    return features.avx2 ? CpuIsa::avx2 : CpuIsa::generic;
  }
  for (CpuIsa isa : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512}) {
    if (std::strcmp(forced, cpu_isa_name(isa)) != 0) continue;
    ZT_CHECK(cpu_supports(isa, features), "ZT_CPU_ISA=", forced, ": this CPU cannot run the ", forced,
             " path (it runs: ", supported_names(features), ")");
    return isa;
  }
  fail("ZT_CPU_ISA=", forced, ": unknown path (expected avx512, avx2 or generic; this CPU runs: ",
       supported_names(features), ")");
}

CpuIsa cpu_isa() {
  static const CpuIsa chosen = choose_cpu_isa(std::getenv("ZT_CPU_ISA"), cpu_features());
  return chosen;
}

}  // namespace zt
