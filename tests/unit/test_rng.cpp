// Unit tests of the counter-based generator (core/rng.h): Philox-4x32-10 known-answer vectors
// of Random123 (kat_vectors), determinism and independence of streams, the range of the
// uniforms and the first two moments of the normals.
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <cstdint>

#include "core/rng.h"

namespace {

// zt::philox4x32 puts (index_lo, index_hi, purpose, step) in the counter words and
// (seed_lo, seed_hi) in the key words; this builds the arguments from raw Random123 words.
std::array<uint32_t, 4> philox_raw(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key_words) {
  zt::RngKey key;
  key.seed = static_cast<uint64_t>(key_words[1]) << 32 | key_words[0];
  key.purpose = counter[2];
  key.step = counter[3];
  const uint64_t index = static_cast<uint64_t>(counter[1]) << 32 | counter[0];
  return zt::philox4x32(key, index);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rng)

BOOST_AUTO_TEST_CASE(philox_known_answers) {
  using Words = std::array<uint32_t, 4>;
  BOOST_TEST((philox_raw({0, 0, 0, 0}, {0, 0}) == Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  BOOST_TEST((philox_raw({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
              Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  BOOST_TEST((philox_raw({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
              Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

BOOST_AUTO_TEST_CASE(deterministic_and_distinct_streams) {
  const zt::RngKey key{42, zt::rng_stream(zt::RngPurpose::LoraInit, 5), 3};
  BOOST_TEST(zt::philox4x32(key, 123) == zt::philox4x32(key, 123));
  BOOST_TEST(zt::rng_uniform(key, 7) == zt::rng_uniform(key, 7));
  BOOST_TEST(zt::rng_normal(key, 7) == zt::rng_normal(key, 7));
  zt::RngKey other_seed = key, other_purpose = key, other_step = key;
  other_seed.seed = 43;
  other_purpose.purpose = zt::rng_stream(zt::RngPurpose::LoraInit, 6);
  other_step.step = 4;
  for (const zt::RngKey& other : {other_seed, other_purpose, other_step}) {
    BOOST_TEST(zt::philox4x32(other, 123) != zt::philox4x32(key, 123));
  }
  BOOST_TEST(zt::philox4x32(key, 123) != zt::philox4x32(key, 124));
  BOOST_TEST(zt::philox4x32(key, 1ull << 32) != zt::philox4x32(key, 0), "the index high word counts");
  BOOST_TEST(zt::rng_stream(zt::RngPurpose::LoraInit, 1) != zt::rng_stream(zt::RngPurpose::LoraDropout, 0));
  BOOST_TEST(zt::rng_stream(zt::RngPurpose::LoraInit, 1) != zt::rng_stream(zt::RngPurpose::LoraInit, 2));
}

BOOST_AUTO_TEST_CASE(uniform_range_and_mean) {
  BOOST_TEST(zt::uniform_from_bits(0u) == 0.0f);
  BOOST_TEST(zt::uniform_from_bits(0xFFFFFFFFu) == 1.0f - std::ldexp(1.0f, -24), "largest value is below 1");
  const zt::RngKey key{7, static_cast<uint32_t>(zt::RngPurpose::Test), 0};
  const int draws = 100000;
  double sum = 0.0;
  float lowest = 1.0f, highest = 0.0f;
  for (int i = 0; i < draws; ++i) {
    const float u = zt::rng_uniform(key, static_cast<uint64_t>(i));
    lowest = std::min(lowest, u);
    highest = std::max(highest, u);
    sum += u;
  }
  BOOST_TEST(lowest >= 0.0f);
  BOOST_TEST(highest < 1.0f);
  BOOST_TEST(lowest < 1e-3f);   // the range is covered
  BOOST_TEST(highest > 0.999f);
  // Mean of U(0,1) is 1/2 with standard error sqrt(1/12 / 1e5) ~ 9e-4: 5 sigma.
  BOOST_TEST(std::fabs(sum / draws - 0.5) < 5e-3, "mean " << sum / draws);
}

BOOST_AUTO_TEST_CASE(normal_moments) {
  const zt::RngKey key{11, static_cast<uint32_t>(zt::RngPurpose::Test), 2};
  const int draws = 100000;
  double sum = 0.0, squares = 0.0;
  for (int i = 0; i < draws; ++i) {
    const double z = zt::rng_normal(key, static_cast<uint64_t>(i));
    BOOST_REQUIRE(std::isfinite(z));
    sum += z;
    squares += z * z;
  }
  const double mean = sum / draws;
  const double variance = squares / draws - mean * mean;
  // Standard errors: mean 1/sqrt(1e5) ~ 3.2e-3, variance sqrt(2/1e5) ~ 4.5e-3; 5 sigma.
  BOOST_TEST(std::fabs(mean) < 0.016, "mean " << mean);
  BOOST_TEST(std::fabs(variance - 1.0) < 0.023, "variance " << variance);
}

BOOST_AUTO_TEST_SUITE_END()
