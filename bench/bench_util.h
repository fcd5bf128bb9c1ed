// Helpers shared by the benchmark drivers (bench/*.cpp): integer flags from argv.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace zt::bench {

// The value after `name` on the command line (e.g. --steps 10), or `fallback`.
inline int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace zt::bench
