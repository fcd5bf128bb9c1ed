// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// counter = (index_lo, index_hi, purpose, step), key = seed; 10 rounds of the Philox S-box.
#include "core/rng.h"

#include <cmath>

namespace zt {

namespace {
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}
}  // namespace

uint32_t rng_stream(RngPurpose purpose, uint32_t sub_stream) {
  return static_cast<uint32_t>(purpose) | (sub_stream << 8);
}

std::array<uint32_t, 4> philox4x32(const RngKey& key, uint64_t index) {
  std::array<uint32_t, 4> counter = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                     key.purpose, key.step};
  uint32_t key0 = static_cast<uint32_t>(key.seed);
  uint32_t key1 = static_cast<uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMultiplier0, counter[0], hi0, lo0);
    mul_hi_lo(kMultiplier1, counter[2], hi1, lo1);
    counter = {hi1 ^ counter[1] ^ key0, lo1, hi0 ^ counter[3] ^ key1, lo0};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

float rng_uniform(const RngKey& key, uint64_t index) { return uniform_from_bits(philox4x32(key, index)[0]); }

float rng_normal(const RngKey& key, uint64_t index) {
  std::array<uint32_t, 4> words = philox4x32(key, index);
  // u1 in (0, 1] so the log is finite.
  double u1 = (static_cast<double>(words[0] >> 8) + 1.0) / 16777216.0;
  double u2 = static_cast<double>(words[1] >> 8) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace zt
