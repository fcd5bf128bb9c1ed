// Random-stream ids and normals on top of Philox-4x32-10 (rng.h).
#include "core/rng.h"

#include <cmath>

namespace zt {

uint32_t rng_stream(RngPurpose purpose, uint32_t sub_stream) {
  return static_cast<uint32_t>(purpose) | (sub_stream << 8);
}

float rng_normal(const RngKey& key, uint64_t index) {
  std::array<uint32_t, 4> words = philox4x32(key, index);
  // u1 in (0, 1] so the log is finite.
  double u1 = (static_cast<double>(words[0] >> 8) + 1.0) / 16777216.0;
  double u2 = static_cast<double>(words[1] >> 8) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace zt
