// Counter-based random numbers (Philox-4x32-10): the value at (seed, purpose, step, index) is a
// pure function of those four, so shuffles, dropout masks and LoRA init do not depend on the
// number of ranks or on what ran before, and a resumed run replays exactly.
#pragma once
#include <array>
#include <cstdint>

// Host-and-device functions: the CUDA backend draws the same dropout masks as the CPU one.
#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

// What the numbers are for; each purpose gets its own stream. Values are part of the
// checkpoint contract (a resumed run must draw the same numbers): append, never renumber.
enum class RngPurpose : uint32_t {
  InitWeights = 1,
  LoraInit = 2,
  LoraDropout = 3,
  Shuffle = 4,
  Test = 5,
  ModelDropout = 6,  // a model's own dropout (OPT's residual dropout), by layer and site
  Sampling = 7,      // generation's token sampling (--temperature > 0), by prompt and new token
  ValueHeadInit = 8,  // the reward objective's fresh value head (train/reward_objective.cpp)
};

struct RngKey {
  uint64_t seed = 0;
  uint32_t purpose = 0;  // RngPurpose, possibly combined with a layer/module id (see stream())
  uint32_t step = 0;
};

// A purpose refined by a sub-stream id (e.g. layer * 16 + module), so two LoRA modules with the
// same index space never share numbers.
uint32_t rng_stream(RngPurpose purpose, uint32_t sub_stream);

// Four 32-bit random words for counter `index` under `key`: Philox-4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11) with counter (index_lo, index_hi,
// purpose, step) and key (seed_lo, seed_hi). Inline so per-element loops (dropout) vectorise.
ZT_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(const RngKey& key, uint64_t index) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32), c2 = key.purpose, c3 = key.step;
  uint32_t key0 = static_cast<uint32_t>(key.seed), key1 = static_cast<uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * c0;
    const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
    const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

// Uniform float in [0, 1) from one 32-bit word (24 random bits, exact in float).
ZT_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// The uniform number for element `index` (each index uses its own Philox block's first word).
ZT_HOST_DEVICE inline float rng_uniform(const RngKey& key, uint64_t index) { return uniform_from_bits(philox4x32(key, index)[0]); }

// A standard normal for element `index` (Box-Muller on the block's first two words).
float rng_normal(const RngKey& key, uint64_t index);

}  // namespace zt
