// bitsandbytes' 4-bit format (core/quant4bit.h) on hand-computable cases, the CPU backend's
// dequantize_4bit against the reference, a ParamStore holding a 4-bit base and a LinearLayer
// computing with it. Bit-exactness against bitsandbytes' algorithm is tests/oracle/test_qlora_format.py.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/quant4bit.h"
#include "model/linear.h"
#include "model/param_store.h"
#include "test_helpers.h"

namespace zt {
namespace {

constexpr QuantConfig kNf4{Quant4Type::NF4, false, 64};
constexpr QuantConfig kNf4Double{Quant4Type::NF4, true, 64};

// The 4-bit index of element i of a payload.
int code_of(const std::vector<uint8_t>& payload, const Quant4Layout& layout, int64_t i) {
  const uint8_t byte = payload[layout.packed + static_cast<size_t>(i / 2)];
  return (i % 2) ? (byte & 0x0F) : (byte >> 4);
}

float absmax_of(const std::vector<uint8_t>& payload, const Quant4Layout& layout, int64_t block) {
  float value = 0.0f;
  std::memcpy(&value, payload.data() + layout.absmax + static_cast<size_t>(block) * sizeof(float), sizeof(float));
  return value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quant4bit)

BOOST_AUTO_TEST_CASE(nf4_table_is_sorted_symmetric_ends_and_zero) {
  const std::array<float, 16>& code = quant4_code(Quant4Type::NF4);
  BOOST_CHECK_EQUAL(code[0], -1.0f);
  BOOST_CHECK_EQUAL(code[7], 0.0f);
  BOOST_CHECK_EQUAL(code[15], 1.0f);
  for (int i = 0; i + 1 < 16; ++i) BOOST_CHECK_LT(code[static_cast<size_t>(i)], code[static_cast<size_t>(i + 1)]);
  const std::array<float, 256>& dynamic = dynamic_code_8bit();
  for (int i = 0; i + 1 < 256; ++i) BOOST_CHECK_LE(dynamic[static_cast<size_t>(i)], dynamic[static_cast<size_t>(i + 1)]);
  BOOST_CHECK_EQUAL(dynamic[255], 1.0f);
}

BOOST_AUTO_TEST_CASE(layout_sizes_are_half_a_byte_plus_scales) {
  const Quant4Layout plain = quant4_layout(4096 * 4096, kNf4);
  BOOST_CHECK_EQUAL(plain.blocks, 4096 * 4096 / 64);
  BOOST_CHECK_EQUAL(plain.packed_bytes(), size_t{4096} * 4096 / 2);
  // 0.5 byte + 4 / 64 bytes of absmax per value, plus the 64-byte code table.
  BOOST_CHECK_CLOSE(static_cast<double>(plain.bytes) / (4096.0 * 4096.0), 0.5 + 4.0 / 64.0, 1e-3);
  const Quant4Layout nested = quant4_layout(4096 * 4096, kNf4Double);
  BOOST_CHECK_EQUAL(nested.nested_blocks, (4096 * 4096 / 64 + 255) / 256);
  BOOST_CHECK_CLOSE(static_cast<double>(nested.bytes) / (4096.0 * 4096.0), 0.5 + 1.0 / 64.0 + 4.0 / (64.0 * 256.0), 0.1);
  for (size_t offset : {plain.absmax, plain.code, nested.nested_absmax, nested.nested_code, nested.nested_offset})
    BOOST_CHECK_EQUAL(offset % 16, 0u);
}

// A block of [absmax, -absmax, 0, values on NF4 entries]: the nearest codes, first in the high nibble.
BOOST_AUTO_TEST_CASE(codes_are_nearest_entries_high_nibble_first) {
  const std::array<float, 16>& code = quant4_code(Quant4Type::NF4);
  std::vector<float> x(64, 0.0f);
  x[0] = 2.0f;
  x[1] = -2.0f;
  for (int i = 0; i < 16; ++i) x[static_cast<size_t>(3 + i)] = 2.0f * code[static_cast<size_t>(i)];
  x[20] = 2.0f * (code[8] + code[9]) / 2.0f;  // the midpoint: ties go to the lower entry
  const Quant4Layout layout = quant4_layout(64, kNf4);
  std::vector<uint8_t> payload(layout.bytes);
  quantize_4bit(x.data(), 64, kNf4, payload.data());
  BOOST_CHECK_EQUAL(payload[0], 0xF0);  // 15 (the max) high, 0 (-max) low
  BOOST_CHECK_EQUAL(code_of(payload, layout, 2), 7);
  for (int i = 0; i < 16; ++i) BOOST_CHECK_EQUAL(code_of(payload, layout, 3 + i), i);
  BOOST_CHECK_EQUAL(code_of(payload, layout, 20), 8);
  BOOST_CHECK_EQUAL(absmax_of(payload, layout, 0), 2.0f);
  const std::vector<float> back = dequantize_payload(payload.data(), 64, kNf4);
  for (int i = 0; i < 16; ++i) BOOST_CHECK_EQUAL(back[static_cast<size_t>(3 + i)], 2.0f * code[static_cast<size_t>(i)]);
}

// bnb's edge cases: an all-zero block stores absmax 0 and the code of 0; a short last block is
// divided by its absmax; an odd count pads the last low nibble with the code of 0.
BOOST_AUTO_TEST_CASE(zero_blocks_short_last_block_and_odd_count) {
  const int64_t n = 64 + 5;
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 64; i < n; ++i) x[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i - 63);  // 0.25 .. 1.25
  const Quant4Layout layout = quant4_layout(n, kNf4);
  BOOST_CHECK_EQUAL(layout.blocks, 2);
  std::vector<uint8_t> payload(layout.bytes);
  quantize_4bit(x.data(), n, kNf4, payload.data());
  BOOST_CHECK_EQUAL(absmax_of(payload, layout, 0), 0.0f);
  for (int64_t i = 0; i < 64; ++i) BOOST_CHECK_EQUAL(code_of(payload, layout, i), 7);
  BOOST_CHECK_EQUAL(absmax_of(payload, layout, 1), 1.25f);
  BOOST_CHECK_EQUAL(code_of(payload, layout, n - 1), 15);  // 1.25 / 1.25
  BOOST_CHECK_EQUAL(code_of(payload, layout, n), 7);        // the pad
  const std::vector<float> back = dequantize_payload(payload.data(), n, kNf4);
  for (int64_t i = 0; i < 64; ++i) BOOST_CHECK_EQUAL(back[static_cast<size_t>(i)], 0.0f);
}

BOOST_AUTO_TEST_CASE(round_trip_error_is_within_half_the_widest_code_gap) {
  for (const QuantConfig config : {kNf4, kNf4Double, QuantConfig{Quant4Type::FP4, false, 64}}) {
    const int64_t n = 64 * 700 + 13;  // more than 2 nested blocks of scales
    std::vector<float> x = test::random_floats(static_cast<size_t>(n), 7, -0.05f, 0.05f);
    std::vector<uint8_t> payload(quant4_layout(n, config).bytes);
    quantize_4bit(x.data(), n, config, payload.data());
    const std::vector<float> back = dequantize_payload(payload.data(), n, config);
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t begin = i / 64 * 64, end = std::min(n, begin + 64);
      float peak = 0.0f;
      for (int64_t j = begin; j < end; ++j) peak = std::max(peak, std::fabs(x[static_cast<size_t>(j)]));
      worst = std::max(worst, std::fabs(static_cast<double>(back[static_cast<size_t>(i)] - x[static_cast<size_t>(i)])) / peak);
    }
    // NF4's widest gap is -1 to -0.6962 (half: 0.152); FP4's 0.6667 to 1 (half: 0.167); double
    // quantization's 8-bit scales add well under 1%.
    BOOST_TEST_INFO(describe(config));
    BOOST_CHECK_LT(worst, config.type == Quant4Type::NF4 ? 0.155 : 0.175);
  }
}

BOOST_AUTO_TEST_CASE(cpu_backend_dequantizes_like_the_reference_in_every_dtype) {
  auto backend = make_cpu_backend();
  const int64_t n = 64 * 300 + 37;
  std::vector<float> x = test::random_floats(static_cast<size_t>(n), 3);
  std::vector<uint8_t> payload(quant4_layout(n, kNf4Double).bytes);
  quantize_4bit(x.data(), n, kNf4Double, payload.data());
  const std::vector<float> expected = dequantize_payload(payload.data(), n, kNf4Double);
  ParamStore store(*backend, {{"w.weight", {1, n}, ParamRole::Linear, 0, "w", 0, ""}}, {false}, 1, DType::F32, {},
                   {kNf4Double});
  store.write_payload("w.weight", payload.data());
  BOOST_CHECK(store.read_param("w.weight") == expected);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> out(static_cast<size_t>(n));
    Buffer stored(*backend, static_cast<size_t>(n) * dtype_size(dtype));
    Tensor view(stored.data(), dtype, {n});
    backend->dequantize_4bit(view, store.quant4_view("w.weight"));
    backend->copy(Tensor(out.data(), DType::F32, {n}), view);
    for (int64_t i = 0; i < n; ++i)
      BOOST_REQUIRE_EQUAL(out[static_cast<size_t>(i)], round_to(dtype, expected[static_cast<size_t>(i)]));
  }
}

BOOST_AUTO_TEST_CASE(store_refuses_dense_views_and_trainable_4bit_weights) {
  auto backend = make_cpu_backend();
  const std::vector<ParamSpec> specs = {{"w.weight", {4, 64}, ParamRole::Linear, 0, "w", 0, ""}};
  ParamStore store(*backend, specs, {false}, 1, DType::BF16, {}, {kNf4});
  BOOST_CHECK_THROW(store.param("w.weight"), Error);
  BOOST_CHECK(store.quantized("w.weight"));
  BOOST_CHECK_EQUAL(store.dequant_workspace().numel(), 4 * 64);
  BOOST_CHECK_THROW(ParamStore(*backend, specs, {true}, 1, DType::BF16, {}, {kNf4}), Error);
}

// A 4-bit LinearLayer computes what a dense one does with the dequantized weight (bf16).
BOOST_AUTO_TEST_CASE(linear_layer_computes_with_the_dequantized_base) {
  auto backend = make_cpu_backend();
  const int64_t in = 128, out = 48, rows = 5;
  const std::vector<ParamSpec> specs = {{"m.weight", {out, in}, ParamRole::Linear, 0, "m", 0, ""}};
  std::vector<float> w = test::random_floats(static_cast<size_t>(in * out), 11, -0.1f, 0.1f);
  ParamStore quantized(*backend, specs, {false}, 1, DType::BF16, {}, {kNf4Double});
  quantized.write_param("m.weight", w.data());
  ParamStore dense(*backend, specs, {false}, 1, DType::BF16);
  const std::vector<float> dequantized = quantized.read_param("m.weight");
  dense.write_param("m.weight", dequantized.data());
  LinearLayer q_layer(quantized, "m", 0.0f, 0.0f, 0), d_layer(dense, "m", 0.0f, 0.0f, 0);
  BOOST_CHECK(q_layer.quantized());
  BOOST_CHECK(q_layer.dtype() == DType::BF16);
  std::vector<float> x = test::random_floats(static_cast<size_t>(rows * in), 5), dy = test::random_floats(static_cast<size_t>(rows * out), 6);
  Buffer xb(*backend, static_cast<size_t>(rows * in) * 2), dyb(*backend, static_cast<size_t>(rows * out) * 2);
  Tensor xt(xb.data(), DType::BF16, {rows, in}), dyt(dyb.data(), DType::BF16, {rows, out});
  backend->copy(xt, Tensor(x.data(), DType::F32, {rows, in}));
  backend->copy(dyt, Tensor(dy.data(), DType::F32, {rows, out}));
  std::vector<std::vector<float>> results;
  for (LinearLayer* layer : {&q_layer, &d_layer}) {
    Buffer yb(*backend, static_cast<size_t>(rows * out) * 2), dxb(*backend, static_cast<size_t>(rows * in) * 2);
    Tensor y(yb.data(), DType::BF16, {rows, out}), dx(dxb.data(), DType::BF16, {rows, in});
    LoraSaved saved;
    DropoutContext dropout;
    layer->forward(*backend, y, xt, saved, dropout);
    layer->backward(*backend, dx, false, dyt, xt, saved, dropout, Tensor(), Tensor());
    std::vector<float> y_host(static_cast<size_t>(rows * out)), dx_host(static_cast<size_t>(rows * in));
    backend->copy(Tensor(y_host.data(), DType::F32, {rows, out}), y);
    backend->copy(Tensor(dx_host.data(), DType::F32, {rows, in}), dx);
    y_host.insert(y_host.end(), dx_host.begin(), dx_host.end());
    results.push_back(y_host);
  }
  BOOST_CHECK(results[0] == results[1]);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace zt
