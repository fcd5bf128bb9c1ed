// Unit tests of V's bias added after the attention (model/attention_bias.h) on the CPU backend
// in fp32: adding b to the attention's output equals adding it to V before the attention (rows
// of the softmax sum to 1), and the bias gradient from d(output) equals the one that flows
// through the attention (the sum over tokens of dV), with and without grouped-query heads.
#include <boost/test/unit_test.hpp>

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/attention_bias.h"
#include "test_helpers.h"
#include "test_util.h"

namespace {

using zt::Tensor;
using zt::test::random_floats;
using zt::test::view;

struct Heads {
  int64_t batch, time, heads, kv_heads, head_dim;
};

void check_value_bias(const Heads& c, uint32_t seed) {
  auto backend = zt::make_cpu_backend();
  const int64_t n = c.batch * c.time, q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  const std::initializer_list<int64_t> q_shape = {c.batch, c.time, c.heads, c.head_dim};
  const std::initializer_list<int64_t> kv_shape = {c.batch, c.time, c.kv_heads, c.head_dim};
  const std::initializer_list<int64_t> lse_shape = {c.batch, c.heads, c.time};
  const float scale = 0.3f;
  std::vector<float> q = random_floats(n * q_width, seed), k = random_floats(n * kv_width, seed + 1);
  std::vector<float> v = random_floats(n * kv_width, seed + 2), d_out = random_floats(n * q_width, seed + 3);
  std::vector<float> bias = random_floats(kv_width, seed + 4, 2.0f, 4.0f);  // [Hkv*D], OPT-like size

  // The HF way: v + b through the attention; b's gradient = sum over tokens of dV.
  std::vector<float> v_biased = v;
  for (int64_t row = 0; row < n; ++row)
    for (int64_t j = 0; j < kv_width; ++j) v_biased[static_cast<size_t>(row * kv_width + j)] += bias[static_cast<size_t>(j)];
  std::vector<float> out_hf(n * q_width), lse_hf(c.batch * c.heads * c.time);
  backend->attention_forward(view(out_hf, q_shape), view(lse_hf, lse_shape), view(q, q_shape), view(k, kv_shape),
                             view(v_biased, kv_shape), Tensor(), scale);
  std::vector<float> dq(n * q_width), dk(n * kv_width), dv(n * kv_width);
  backend->attention_backward(view(dq, q_shape), view(dk, kv_shape), view(dv, kv_shape), view(d_out, q_shape),
                              view(q, q_shape), view(k, kv_shape), view(v_biased, kv_shape), view(out_hf, q_shape),
                              view(lse_hf, lse_shape), Tensor(), scale);
  std::vector<float> bias_grad_hf(kv_width, 0.0f);
  for (int64_t row = 0; row < n; ++row)
    for (int64_t j = 0; j < kv_width; ++j) bias_grad_hf[static_cast<size_t>(j)] += dv[static_cast<size_t>(row * kv_width + j)];

  // zerotune's way: the attention of v, then + b; b's gradient from d(output).
  std::vector<float> out(n * q_width), lse(c.batch * c.heads * c.time);
  backend->attention_forward(view(out, q_shape), view(lse, lse_shape), view(q, q_shape), view(k, kv_shape),
                             view(v, kv_shape), Tensor(), scale);
  zt::add_value_bias(*backend, view(out, {n, q_width}), view(bias, {kv_width}), c.heads, c.kv_heads, c.head_dim);
  std::vector<float> bias_grad(kv_width, 0.5f);  // += onto what is there
  zt::value_bias_backward(*backend, view(bias_grad, {kv_width}), view(d_out, {n, q_width}), c.heads, c.kv_heads,
                          c.head_dim);
  for (float& value : bias_grad) value -= 0.5f;

  zt::test::check_close(out, out_hf, 1e-5, 1e-5, "attention output with the bias after it");
  zt::test::check_close(bias_grad, bias_grad_hf, 1e-4, 1e-4, "bias gradient from d(output)");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_bias)

BOOST_AUTO_TEST_CASE(after_the_attention_equals_inside_it) {
  check_value_bias({2, 9, 4, 4, 8}, 11);  // OPT: as many kv heads as heads
  check_value_bias({2, 9, 6, 2, 8}, 21);  // Qwen2: grouped-query heads
  check_value_bias({1, 5, 4, 1, 4}, 31);  // one kv head
}

BOOST_AUTO_TEST_CASE(bad_shapes_are_named) {
  auto backend = zt::make_cpu_backend();
  std::vector<float> att(2 * 16), bias(6);
  zt::test::check_error_mentions(
      [&] { zt::add_value_bias(*backend, view(att, {2, 16}), view(bias, {6}), 4, 2, 4); },
      {"add_value_bias", "bias", "kv heads x head dim = 8"});
  zt::test::check_error_mentions(
      [&] { zt::add_value_bias(*backend, view(att, {2, 16}), view(bias, {6}), 4, 3, 2); },
      {"add_value_bias", "multiple of kv heads"});
}

BOOST_AUTO_TEST_SUITE_END()
