// ZeRO++'s block quantization (core/block_quant.h, Backend::quantize_blocks / dequantize_blocks)
// on the CPU backend: hand-computed codes and scales, the int4 nibble order, the round trip
// within half a step of each block's scale, an all-zero block, a non-finite value carried to its
// whole block (so fp16 overflow survives qgZ), accumulation, and the refused arguments.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "core/block_quant.h"
#include "core/error.h"
#include "test_helpers.h"

namespace zt {
namespace {

using test::view;

struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Quantized quantize(Backend& cpu, std::vector<float> values, int bits, int64_t block) {
  const int64_t n = static_cast<int64_t>(values.size());
  Quantized q{std::vector<uint8_t>(static_cast<size_t>(block_quant_bytes(n, bits))),
              std::vector<float>(static_cast<size_t>(block_quant_blocks(n, block)))};
  cpu.quantize_blocks(Tensor(q.codes.data(), DType::U8, {static_cast<int64_t>(q.codes.size())}),
                      view(q.scales, {static_cast<int64_t>(q.scales.size())}), view(values, {n}), bits, block);
  return q;
}

std::vector<float> dequantize(Backend& cpu, Quantized& q, int64_t n, int bits, int64_t block) {
  std::vector<float> out(static_cast<size_t>(n), -99.0f);
  cpu.dequantize_blocks(view(out, {n}), Tensor(q.codes.data(), DType::U8, {static_cast<int64_t>(q.codes.size())}),
                        view(q.scales, {static_cast<int64_t>(q.scales.size())}), bits, block, false);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(block_quant)

BOOST_AUTO_TEST_CASE(int8_codes_scales_and_a_zero_block_by_hand) {
  auto cpu = make_cpu_backend();
  // Blocks of 4: absmax 4 (scale 4/127), all zeros (scale 1), and a short last block of one value.
  Quantized q = quantize(*cpu, {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, 0.0f, 0.0f, 0.0f, -3.0f}, 8, 4);
  BOOST_TEST(q.scales[0] == 4.0f / 127.0f);
  BOOST_TEST(q.scales[1] == 1.0f);
  BOOST_TEST(q.scales[2] == 3.0f / 127.0f);
  // rint(1 / (4/127)) = rint(31.75) = 32, -63.5 -> -64 (half to even), 15.875 -> 16, 127; biased by 128.
  const std::vector<uint8_t> expected = {160, 64, 144, 255, 128, 128, 128, 128, 1};
  BOOST_TEST(q.codes == expected, boost::test_tools::per_element());
  const std::vector<float> back = dequantize(*cpu, q, 9, 8, 4);
  BOOST_TEST(back[3] == 4.0f);  // the block's largest value comes back exactly (127 x absmax / 127)
  for (int i = 4; i < 8; ++i) BOOST_TEST(back[static_cast<size_t>(i)] == 0.0f);
  BOOST_TEST(back[8] == -3.0f);
}

BOOST_AUTO_TEST_CASE(int4_packs_element_2i_low_and_2i_plus_1_high) {
  auto cpu = make_cpu_backend();
  // One block of 4 (absmax 7: scale 1) and a short block of 1: codes biased by 8.
  Quantized q = quantize(*cpu, {-7.0f, 1.0f, 3.0f, 7.0f, 2.0f}, 4, 4);
  BOOST_TEST(q.scales[0] == 1.0f);
  BOOST_TEST(q.scales[1] == 2.0f / 7.0f);
  const std::vector<uint8_t> expected = {static_cast<uint8_t>(1 | (9 << 4)), static_cast<uint8_t>(11 | (15 << 4)),
                                         15};  // the last byte's high nibble unused: 0
  BOOST_TEST(q.codes == expected, boost::test_tools::per_element());
  const std::vector<float> back = dequantize(*cpu, q, 5, 4, 4);
  const std::vector<float> want = {-7.0f, 1.0f, 3.0f, 7.0f, 2.0f};
  BOOST_TEST(back == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(round_trip_within_half_a_step_and_accumulate_adds) {
  auto cpu = make_cpu_backend();
  for (const int bits : {8, 4}) {
    const int64_t n = 3000, block = 512;
    std::vector<float> values = test::random_floats(static_cast<size_t>(n), 7, -3.0f, 3.0f);
    Quantized q = quantize(*cpu, values, bits, block);
    const std::vector<float> back = dequantize(*cpu, q, n, bits, block);
    for (int64_t i = 0; i < n; ++i) {
      const float scale = q.scales[static_cast<size_t>(i / block)];
      BOOST_TEST(std::fabs(back[static_cast<size_t>(i)] - values[static_cast<size_t>(i)]) <= 0.5f * scale * 1.0001f);
    }
    std::vector<float> sum(static_cast<size_t>(n), 1.0f);
    cpu->dequantize_blocks(view(sum, {n}), Tensor(q.codes.data(), DType::U8, {static_cast<int64_t>(q.codes.size())}),
                           view(q.scales, {static_cast<int64_t>(q.scales.size())}), bits, block, true);
    for (int64_t i = 0; i < n; ++i) BOOST_TEST(sum[static_cast<size_t>(i)] == 1.0f + back[static_cast<size_t>(i)]);
  }
}

BOOST_AUTO_TEST_CASE(a_non_finite_value_poisons_its_block_only) {
  auto cpu = make_cpu_backend();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float bad : {inf, std::numeric_limits<float>::quiet_NaN()}) {
    Quantized q = quantize(*cpu, {1.0f, bad, 2.0f, 0.5f}, 4, 2);
    const std::vector<float> back = dequantize(*cpu, q, 4, 4, 2);
    BOOST_TEST(!std::isfinite(back[0]));
    BOOST_TEST(!std::isfinite(back[1]));
    BOOST_TEST(back[2] == 2.0f);
  }
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_refused_by_name) {
  auto cpu = make_cpu_backend();
  std::vector<float> values(8, 1.0f), scales(2);
  std::vector<uint8_t> codes(8);
  auto run = [&](int bits, int64_t block, int64_t code_count) {
    cpu->quantize_blocks(Tensor(codes.data(), DType::U8, {code_count}), view(scales, {2}), view(values, {8}), bits, block);
  };
  BOOST_CHECK_EXCEPTION(run(3, 4, 8), Error, [](const Error& e) { return std::string(e.what()).find("bits 3") != std::string::npos; });
  BOOST_CHECK_EXCEPTION(run(8, 3, 8), Error, [](const Error& e) { return std::string(e.what()).find("even") != std::string::npos; });
  BOOST_CHECK_EXCEPTION(run(4, 4, 8), Error, [](const Error& e) { return std::string(e.what()).find("q") != std::string::npos; });
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace zt
