// Counter-based random numbers (Philox-4x32-10): the value at (seed, purpose, step, index) is a
// pure function of those four, so shuffles, dropout masks and LoRA init do not depend on the
// number of ranks or on what ran before, and a resumed run replays exactly.
#pragma once
#include <array>
#include <cstdint>

namespace zt {

// What the numbers are for; each purpose gets its own stream. Values are part of the
// checkpoint contract (a resumed run must draw the same numbers): append, never renumber.
enum class RngPurpose : uint32_t {
  InitWeights = 1,
  LoraInit = 2,
  LoraDropout = 3,
  Shuffle = 4,
  Test = 5,
};

struct RngKey {
  uint64_t seed = 0;
  uint32_t purpose = 0;  // RngPurpose, possibly combined with a layer/module id (see stream())
  uint32_t step = 0;
};

// A purpose refined by a sub-stream id (e.g. layer * 16 + module), so two LoRA modules with the
// same index space never share numbers.
uint32_t rng_stream(RngPurpose purpose, uint32_t sub_stream);

// Four 32-bit random words for counter `index` under `key`.
std::array<uint32_t, 4> philox4x32(const RngKey& key, uint64_t index);

// Uniform float in [0, 1) from one 32-bit word (24 random bits, exact in float).
inline float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// The uniform number for element `index` (each index uses its own Philox block's first word).
float rng_uniform(const RngKey& key, uint64_t index);

// A standard normal for element `index` (Box-Muller on the block's first two words).
float rng_normal(const RngKey& key, uint64_t index);

}  // namespace zt
