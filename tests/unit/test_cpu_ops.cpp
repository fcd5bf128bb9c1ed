// Unit tests of the CPU backend ops: each op against a naive double-precision reference written
// here, with outputs poisoned (NaN) before each call so that an element an op forgets to write
// fails the comparison, and the argument checks (shape/dtype mismatches throw zt::Error).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_vector_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "test_helpers.h"

namespace {

using zt::Tensor;
using zt::test::check_close;
using zt::test::poison;
using zt::test::random_floats;
using zt::test::view;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// ---- naive references ------------------------------------------------------------------------

// C[M,N] = alpha op(A) op(B) + beta C0 in double.
std::vector<double> reference_matmul(const std::vector<float>& a, bool transpose_a,
                                     const std::vector<float>& b, bool transpose_b,
                                     const std::vector<float>& c0, int64_t m, int64_t n, int64_t k,
                                     double alpha, double beta) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double a_ip = transpose_a ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
        const double b_pj = transpose_b ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
        sum += a_ip * b_pj;
      }
      const size_t index = static_cast<size_t>(i * n + j);
      c[index] = alpha * sum + (beta == 0.0 ? 0.0 : beta * c0[index]);
    }
  }
  return c;
}

struct AttentionSizes {
  int64_t batch, time, heads, kv_heads, head_dim;
  int64_t q_numel() const { return batch * time * heads * head_dim; }
  int64_t kv_numel() const { return batch * time * kv_heads * head_dim; }
  size_t q_index(int64_t b, int64_t t, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * time + t) * heads + h) * head_dim + d);
  }
  size_t kv_index(int64_t b, int64_t t, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * time + t) * kv_heads + h) * head_dim + d);
  }
};

// Causal softmax probabilities of query (b, h, i) over keys j <= i, and their log-sum-exp.
std::vector<double> reference_probs(const AttentionSizes& s, const std::vector<float>& q,
                                    const std::vector<float>& k, double scale, int64_t b,
                                    int64_t h, int64_t i, double& lse) {
  const int64_t kv_head = h / (s.heads / s.kv_heads);
  std::vector<double> scores(static_cast<size_t>(i + 1));
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < s.head_dim; ++d) {
      dot += static_cast<double>(q[s.q_index(b, i, h, d)]) * k[s.kv_index(b, j, kv_head, d)];
    }
    scores[static_cast<size_t>(j)] = scale * dot;
    row_max = std::max(row_max, scale * dot);
  }
  double sum = 0.0;
  for (double score : scores) sum += std::exp(score - row_max);
  lse = row_max + std::log(sum);
  for (double& score : scores) score = std::exp(score - lse);
  return scores;
}

void reference_attention(const AttentionSizes& s, const std::vector<float>& q,
                         const std::vector<float>& k, const std::vector<float>& v, double scale,
                         std::vector<double>& out, std::vector<double>& lse) {
  out.assign(static_cast<size_t>(s.q_numel()), 0.0);
  lse.assign(static_cast<size_t>(s.batch * s.heads * s.time), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv_head = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.time; ++i) {
        double row_lse = 0.0;
        const std::vector<double> p = reference_probs(s, q, k, scale, b, h, i, row_lse);
        lse[static_cast<size_t>((b * s.heads + h) * s.time + i)] = row_lse;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < s.head_dim; ++d) {
            out[s.q_index(b, i, h, d)] += p[static_cast<size_t>(j)] * v[s.kv_index(b, j, kv_head, d)];
          }
        }
      }
    }
  }
}

void reference_attention_backward(const AttentionSizes& s, const std::vector<float>& dout,
                                  const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, double scale,
                                  std::vector<double>& dq, std::vector<double>& dk,
                                  std::vector<double>& dv) {
  dq.assign(static_cast<size_t>(s.q_numel()), 0.0);
  dk.assign(static_cast<size_t>(s.kv_numel()), 0.0);
  dv.assign(static_cast<size_t>(s.kv_numel()), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv_head = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.time; ++i) {
        double row_lse = 0.0;
        const std::vector<double> p = reference_probs(s, q, k, scale, b, h, i, row_lse);
        std::vector<double> dp(p.size());
        double dot = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double sum = 0.0;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            sum += static_cast<double>(dout[s.q_index(b, i, h, d)]) * v[s.kv_index(b, j, kv_head, d)];
          }
          dp[static_cast<size_t>(j)] = sum;
          dot += p[static_cast<size_t>(j)] * sum;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double pj = p[static_cast<size_t>(j)];
          const double ds = pj * (dp[static_cast<size_t>(j)] - dot);
          for (int64_t d = 0; d < s.head_dim; ++d) {
            dq[s.q_index(b, i, h, d)] += scale * ds * k[s.kv_index(b, j, kv_head, d)];
            dk[s.kv_index(b, j, kv_head, d)] += scale * ds * q[s.q_index(b, i, h, d)];
            dv[s.kv_index(b, j, kv_head, d)] += pj * dout[s.q_index(b, i, h, d)];
          }
        }
      }
    }
  }
}

// ---- helpers for the dtype tests -------------------------------------------------------------

Tensor half_view(std::vector<uint16_t>& bits, zt::DType dtype) {
  return Tensor(bits.data(), dtype, {static_cast<int64_t>(bits.size())});
}

template <class Call>
void check_throws(Call call, const std::string& what) {
  bool thrown = false;
  try {
    call();
  } catch (const zt::Error& error) {
    thrown = true;
    BOOST_TEST_MESSAGE(what << " -> " << error.what());
    BOOST_TEST(std::string(error.what()).size() > 10u, what << ": the message says something");
  }
  BOOST_TEST(thrown, what << " throws zt::Error");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_ops)

BOOST_AUTO_TEST_CASE(matmul_all_transposes_with_alpha_beta) {
  auto backend = zt::make_cpu_backend();
  const int64_t m = 13, n = 17, k = 11;
  for (int variant = 0; variant < 4; ++variant) {
    const bool transpose_a = variant & 1, transpose_b = variant & 2;
    std::vector<float> a = random_floats(static_cast<size_t>(m * k), 1u + static_cast<uint32_t>(variant));
    std::vector<float> b = random_floats(static_cast<size_t>(k * n), 11u + static_cast<uint32_t>(variant));
    std::vector<float> c0 = random_floats(static_cast<size_t>(m * n), 21u);
    Tensor a_view = transpose_a ? view(a, {k, m}) : view(a, {m, k});
    Tensor b_view = transpose_b ? view(b, {n, k}) : view(b, {k, n});
    // beta != 0 reads C; beta == 0 must ignore it (NaN poison must not leak through).
    std::vector<float> c = c0;
    backend->matmul(view(c, {m, n}), a_view, transpose_a, b_view, transpose_b, 0.7f, 0.3f);
    check_close(c, reference_matmul(a, transpose_a, b, transpose_b, c0, m, n, k, 0.7, 0.3), 1e-5,
                1e-6, "matmul alpha/beta variant " + std::to_string(variant));
    poison(c);
    backend->matmul(view(c, {m, n}), a_view, transpose_a, b_view, transpose_b, 1.0f, 0.0f);
    check_close(c, reference_matmul(a, transpose_a, b, transpose_b, c0, m, n, k, 1.0, 0.0), 1e-5,
                1e-6, "matmul beta=0 variant " + std::to_string(variant));
  }
}

BOOST_AUTO_TEST_CASE(matmul_flattens_leading_dimensions) {
  auto backend = zt::make_cpu_backend();
  // x[B=2, T=3, K=5] W^T with W[N=4, K=5] -> y[2, 3, 4], as a linear layer calls it.
  std::vector<float> x = random_floats(30, 3u), w = random_floats(20, 4u), y(24);
  poison(y);
  backend->matmul(view(y, {2, 3, 4}), view(x, {2, 3, 5}), false, view(w, {4, 5}), true, 1.0f, 0.0f);
  check_close(y, reference_matmul(x, false, w, true, y, 6, 4, 5, 1.0, 0.0), 1e-5, 1e-6,
              "matmul with a 3-d operand");
}

BOOST_AUTO_TEST_CASE(add_bias_and_bias_backward) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 37, cols = 300;  // cols spans several column blocks
  std::vector<float> y = random_floats(static_cast<size_t>(rows * cols), 5u);
  std::vector<float> bias = random_floats(static_cast<size_t>(cols), 6u);
  std::vector<double> expected(y.size());
  for (size_t i = 0; i < y.size(); ++i) expected[i] = static_cast<double>(y[i]) + bias[i % static_cast<size_t>(cols)];
  backend->add_bias(view(y, {rows, cols}), view(bias, {cols}));
  check_close(y, expected, 1e-6, 1e-7, "add_bias");

  std::vector<float> dbias = random_floats(static_cast<size_t>(cols), 7u);
  std::vector<double> expected_dbias = to_double(dbias);
  for (size_t i = 0; i < y.size(); ++i) expected_dbias[i % static_cast<size_t>(cols)] += y[i];
  backend->bias_backward(view(dbias, {cols}), view(y, {rows, cols}));
  check_close(dbias, expected_dbias, 1e-5, 1e-5, "bias_backward accumulates column sums");
  backend->bias_backward(Tensor(), view(y, {rows, cols}));  // frozen bias: skipped, no throw
}

BOOST_AUTO_TEST_CASE(embedding_forward_and_backward_with_repeated_ids) {
  auto backend = zt::make_cpu_backend();
  const int64_t vocab = 7, cols = 130;
  std::vector<int32_t> ids = {3, 1, 3, 0, 6, 3, 1, 2, 3};
  const int64_t rows = static_cast<int64_t>(ids.size());
  std::vector<float> table = random_floats(static_cast<size_t>(vocab * cols), 8u);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  poison(out);
  backend->embedding_forward(view(out, {rows, cols}), view(table, {vocab, cols}), view(ids, {rows}));
  std::vector<double> expected(out.size());
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < cols; ++c) {
      expected[static_cast<size_t>(n * cols + c)] = table[static_cast<size_t>(ids[static_cast<size_t>(n)] * cols + c)];
    }
  }
  check_close(out, expected, 0.0, 0.0, "embedding_forward copies rows");

  std::vector<float> dout = random_floats(out.size(), 9u);
  std::vector<float> dtable = random_floats(table.size(), 10u);
  std::vector<double> expected_dtable = to_double(dtable);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < cols; ++c) {
      expected_dtable[static_cast<size_t>(ids[static_cast<size_t>(n)] * cols + c)] += dout[static_cast<size_t>(n * cols + c)];
    }
  }
  std::vector<float> dtable_again = dtable;
  backend->embedding_backward(view(dtable, {vocab, cols}), view(dout, {rows, cols}), view(ids, {rows}));
  check_close(dtable, expected_dtable, 1e-6, 1e-6, "embedding_backward scatters with repeats");
  backend->embedding_backward(view(dtable_again, {vocab, cols}), view(dout, {rows, cols}), view(ids, {rows}));
  BOOST_TEST(dtable == dtable_again, "embedding_backward is deterministic (bitwise)");
  backend->embedding_backward(Tensor(), view(dout, {rows, cols}), view(ids, {rows}));  // frozen

  std::vector<int32_t> bad_ids = ids;
  bad_ids[4] = 7;
  check_throws([&] { backend->embedding_forward(view(out, {rows, cols}), view(table, {vocab, cols}), view(bad_ids, {rows})); },
               "embedding id == vocab");
  bad_ids[4] = -1;
  check_throws([&] { backend->embedding_backward(view(dtable, {vocab, cols}), view(dout, {rows, cols}), view(bad_ids, {rows})); },
               "negative embedding id");
}

BOOST_AUTO_TEST_CASE(rmsnorm_forward_matches_reference) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 6, cols = 96;
  const float eps = 1e-5f;
  std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 12u, -2.0f, 3.0f);
  std::vector<float> weight = random_floats(static_cast<size_t>(cols), 13u, 0.5f, 1.5f);
  std::vector<float> y(x.size()), rstd(static_cast<size_t>(rows));
  poison(y);
  poison(rstd);
  // x seen as [2, 3, C]: leading dimensions are rows.
  backend->rmsnorm_forward(view(y, {2, 3, cols}), view(rstd, {rows}), view(x, {2, 3, cols}),
                           view(weight, {cols}), eps);
  std::vector<double> expected_y(x.size()), expected_rstd(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) {
    double squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) squares += std::pow(static_cast<double>(x[static_cast<size_t>(n * cols + c)]), 2);
    const double r = 1.0 / std::sqrt(squares / static_cast<double>(cols) + eps);
    expected_rstd[static_cast<size_t>(n)] = r;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(n * cols + c);
      expected_y[i] = x[i] * r * weight[static_cast<size_t>(c)];
    }
  }
  check_close(rstd, expected_rstd, 1e-6, 0.0, "rmsnorm rstd");
  check_close(y, expected_y, 1e-5, 1e-7, "rmsnorm y");
}

BOOST_AUTO_TEST_CASE(layernorm_forward_matches_reference) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 5, cols = 200;
  const float eps = 1e-5f;
  // A large mean (+3) checks the variance is not computed as E[x^2] - E[x]^2 in fp32.
  std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 14u, 2.0f, 4.0f);
  std::vector<float> weight = random_floats(static_cast<size_t>(cols), 15u, 0.5f, 1.5f);
  std::vector<float> bias = random_floats(static_cast<size_t>(cols), 16u);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  poison(y);
  poison(mean);
  poison(rstd);
  backend->layernorm_forward(view(y, {rows, cols}), view(mean, {rows}), view(rstd, {rows}),
                             view(x, {rows, cols}), view(weight, {cols}), view(bias, {cols}), eps);
  std::vector<double> expected_y(x.size()), expected_mean(static_cast<size_t>(rows)),
      expected_rstd(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) {
    double sum = 0.0, squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += x[static_cast<size_t>(n * cols + c)];
    const double mu = sum / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) squares += std::pow(x[static_cast<size_t>(n * cols + c)] - mu, 2);
    const double r = 1.0 / std::sqrt(squares / static_cast<double>(cols) + eps);
    expected_mean[static_cast<size_t>(n)] = mu;
    expected_rstd[static_cast<size_t>(n)] = r;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(n * cols + c);
      expected_y[i] = (x[i] - mu) * r * weight[static_cast<size_t>(c)] + bias[static_cast<size_t>(c)];
    }
  }
  check_close(mean, expected_mean, 1e-6, 0.0, "layernorm mean");
  check_close(rstd, expected_rstd, 1e-6, 0.0, "layernorm rstd");
  check_close(y, expected_y, 1e-5, 1e-6, "layernorm y");
}

BOOST_AUTO_TEST_CASE(rope_forward_and_backward_match_reference) {
  auto backend = zt::make_cpu_backend();
  const int64_t batch = 2, time = 9, heads = 3, head_dim = 8, half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / static_cast<double>(head_dim)));
  }
  const std::vector<float> x = random_floats(static_cast<size_t>(batch * time * heads * head_dim), 17u);
  // Rotation by +-angle, angle = t * inv_freq[i] taken in fp32 as HF does, cos/sin in double.
  auto reference = [&](double direction) {
    std::vector<double> out(x.size());
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < time; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<float>(t) * inv_freq[static_cast<size_t>(i)];
            const double cos_a = std::cos(angle), sin_a = direction * std::sin(angle);
            const size_t first = static_cast<size_t>(((b * time + t) * heads + h) * head_dim + i);
            const size_t second = first + static_cast<size_t>(half);
            out[first] = x[first] * cos_a - x[second] * sin_a;
            out[second] = x[second] * cos_a + x[first] * sin_a;
          }
        }
      }
    }
    return out;
  };
  std::vector<float> rotated = x;
  backend->rope_forward(view(rotated, {batch, time, heads, head_dim}), view(inv_freq, {half}), Tensor());
  check_close(rotated, reference(1.0), 1e-5, 1e-6, "rope_forward");
  std::vector<float> back_rotated = x;
  backend->rope_backward(view(back_rotated, {batch, time, heads, head_dim}), view(inv_freq, {half}), Tensor());
  check_close(back_rotated, reference(-1.0), 1e-5, 1e-6, "rope_backward rotates by -angle");
  backend->rope_backward(view(rotated, {batch, time, heads, head_dim}), view(inv_freq, {half}), Tensor());
  check_close(rotated, to_double(x), 1e-5, 1e-6, "rope_backward undoes rope_forward");
  // Position 0 is the identity.
  for (int64_t i = 0; i < heads * head_dim; ++i) {
    BOOST_TEST(rotated[static_cast<size_t>(i)] == x[static_cast<size_t>(i)]);
  }
}

BOOST_AUTO_TEST_CASE(swiglu_and_relu_match_reference) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 7, cols = 50;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> gate = random_floats(n, 18u, -6.0f, 6.0f);
  std::vector<float> up = random_floats(n, 19u, -2.0f, 2.0f);
  // The tails of the sigmoid.
  gate[0] = -100.0f;
  gate[1] = 100.0f;
  gate[2] = -30.0f;
  gate[3] = 30.0f;
  gate[4] = 0.0f;
  std::vector<float> h(n);
  poison(h);
  backend->swiglu_forward(view(h, {rows, cols}), view(gate, {rows, cols}), view(up, {rows, cols}));
  std::vector<double> expected_h(n), expected_dgate(n), expected_dup(n);
  std::vector<float> dh = random_floats(n, 20u);
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i], sigmoid = 1.0 / (1.0 + std::exp(-g));
    expected_h[i] = g * sigmoid * up[i];
    expected_dgate[i] = dh[i] * up[i] * sigmoid * (1.0 + g * (1.0 - sigmoid));
    expected_dup[i] = dh[i] * g * sigmoid;
  }
  check_close(h, expected_h, 3e-6, 1e-30, "swiglu_forward");
  std::vector<float> dgate(n), dup(n);
  poison(dgate);
  poison(dup);
  backend->swiglu_backward(view(dgate, {rows, cols}), view(dup, {rows, cols}), view(dh, {rows, cols}),
                           view(gate, {rows, cols}), view(up, {rows, cols}));
  check_close(dgate, expected_dgate, 1e-5, 1e-30, "swiglu_backward dgate");
  check_close(dup, expected_dup, 1e-5, 1e-30, "swiglu_backward dup");

  // ReLU in place (y aliases x), NaN propagates (overflow checks must see it).
  std::vector<float> x = random_floats(n, 21u);
  x[5] = kNaN;
  const std::vector<float> x_before = x;
  backend->relu_forward(view(x, {rows, cols}), view(x, {rows, cols}));
  for (size_t i = 0; i < n; ++i) {
    if (i == 5) {
      BOOST_TEST(std::isnan(x[i]));
    } else {
      BOOST_TEST(x[i] == std::max(x_before[i], 0.0f));
    }
  }
  std::vector<float> dy = random_floats(n, 22u), dx(n);
  poison(dx);
  backend->relu_backward(view(dx, {rows, cols}), view(dy, {rows, cols}), view(x, {rows, cols}));
  for (size_t i = 0; i < n; ++i) BOOST_TEST(dx[i] == (x[i] > 0.0f ? dy[i] : 0.0f));
  backend->relu_backward(view(dy, {rows, cols}), view(dy, {rows, cols}), view(x, {rows, cols}));
  BOOST_TEST(dy == dx, "relu_backward in place (dx aliases dy)");
}

BOOST_AUTO_TEST_CASE(attention_forward_and_backward_match_reference) {
  auto backend = zt::make_cpu_backend();
  // GQA (H=4, Hkv=2) and plain multi-head (H=Hkv); T crosses the 64-row query blocks.
  const AttentionSizes cases[] = {{2, 70, 4, 2, 16}, {1, 130, 2, 2, 8}, {3, 5, 4, 4, 4}};
  for (const AttentionSizes& s : cases) {
    const std::string name = "attention B=" + std::to_string(s.batch) + " T=" + std::to_string(s.time) +
                             " H=" + std::to_string(s.heads) + " Hkv=" + std::to_string(s.kv_heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    std::vector<float> q = random_floats(static_cast<size_t>(s.q_numel()), 23u, -2.0f, 2.0f);
    std::vector<float> k = random_floats(static_cast<size_t>(s.kv_numel()), 24u, -2.0f, 2.0f);
    std::vector<float> v = random_floats(static_cast<size_t>(s.kv_numel()), 25u);
    std::vector<float> out(q.size()), lse(static_cast<size_t>(s.batch * s.heads * s.time));
    poison(out);
    poison(lse);
    const Tensor q_view = view(q, {s.batch, s.time, s.heads, s.head_dim});
    const Tensor k_view = view(k, {s.batch, s.time, s.kv_heads, s.head_dim});
    const Tensor v_view = view(v, {s.batch, s.time, s.kv_heads, s.head_dim});
    const Tensor out_view = view(out, {s.batch, s.time, s.heads, s.head_dim});
    const Tensor lse_view = view(lse, {s.batch, s.heads, s.time});
    backend->attention_forward(out_view, lse_view, q_view, k_view, v_view, Tensor(), scale);
    std::vector<double> expected_out, expected_lse;
    reference_attention(s, q, k, v, scale, expected_out, expected_lse);
    check_close(out, expected_out, 1e-4, 2e-6, name + " out");
    check_close(lse, expected_lse, 1e-6, 1e-6, name + " lse");

    std::vector<float> dout = random_floats(q.size(), 26u);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    poison(dq);
    poison(dk);
    poison(dv);
    backend->attention_backward(view(dq, {s.batch, s.time, s.heads, s.head_dim}),
                                view(dk, {s.batch, s.time, s.kv_heads, s.head_dim}),
                                view(dv, {s.batch, s.time, s.kv_heads, s.head_dim}),
                                view(dout, {s.batch, s.time, s.heads, s.head_dim}), q_view, k_view,
                                v_view, out_view, lse_view, Tensor(), scale);
    std::vector<double> expected_dq, expected_dk, expected_dv;
    reference_attention_backward(s, dout, q, k, v, scale, expected_dq, expected_dk, expected_dv);
    check_close(dq, expected_dq, 1e-4, 1e-5, name + " dq");
    check_close(dk, expected_dk, 1e-4, 1e-5, name + " dk");
    check_close(dv, expected_dv, 1e-4, 1e-5, name + " dv");
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_loss_and_gradient) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 6, vocab = 301;
  std::vector<float> logits = random_floats(static_cast<size_t>(rows * vocab), 27u, -5.0f, 5.0f);
  for (int64_t j = 0; j < vocab; ++j) logits[static_cast<size_t>(2 * vocab + j)] += 1000.0f;  // stability
  std::vector<int32_t> targets = {5, 300, 0, -100, 17, 99999};  // unmasked rows: never read
  std::vector<uint8_t> mask = {1, 1, 1, 0, 1, 0};
  const float grad_scale = 0.25f;
  double expected_loss = 0.0;
  std::vector<double> expected_grad(logits.size(), 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    if (!mask[static_cast<size_t>(n)]) continue;
    const float* row = logits.data() + n * vocab;
    const double row_max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - row_max);
    const double lse = row_max + std::log(sum);
    expected_loss += lse - row[targets[static_cast<size_t>(n)]];
    for (int64_t j = 0; j < vocab; ++j) {
      const double onehot = j == targets[static_cast<size_t>(n)] ? 1.0 : 0.0;
      expected_grad[static_cast<size_t>(n * vocab + j)] = (std::exp(row[j] - lse) - onehot) * grad_scale;
    }
  }
  // grad_scale = 0: the loss only, logits untouched.
  std::vector<float> untouched = logits;
  const double loss_only = backend->cross_entropy(view(untouched, {rows, vocab}), view(targets, {rows}),
                                                  view(mask, {rows}), 0.0f);
  BOOST_TEST(loss_only == expected_loss, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(untouched == logits, "grad_scale 0 leaves the logits unchanged");
  // With the gradient: written over the logits, 0 on unmasked rows.
  std::vector<float> grad = logits;
  const double loss = backend->cross_entropy(view(grad, {2, 3, vocab}), view(targets, {2, 3}),
                                             view(mask, {rows}), grad_scale);
  BOOST_TEST(loss == expected_loss, boost::test_tools::tolerance(1e-6));
  check_close(grad, expected_grad, 1e-5, 1e-8, "cross_entropy dlogits");
  // No target tokens: zero loss, zero gradient.
  std::vector<uint8_t> none(static_cast<size_t>(rows), 0);
  grad = logits;
  BOOST_TEST(backend->cross_entropy(view(grad, {rows, vocab}), view(targets, {rows}), view(none, {rows}), 1.0f) == 0.0);
  BOOST_TEST(std::all_of(grad.begin(), grad.end(), [](float value) { return value == 0.0f; }));
  // NaN logits give a NaN loss (the fp16 overflow check relies on it).
  grad = logits;
  grad[7] = kNaN;
  BOOST_TEST(std::isnan(backend->cross_entropy(view(grad, {rows, vocab}), view(targets, {rows}), view(mask, {rows}), 1.0f)));
  // A masked row's target outside the vocabulary is an error.
  std::vector<int32_t> bad_targets = targets;
  bad_targets[1] = static_cast<int32_t>(vocab);
  check_throws([&] { backend->cross_entropy(view(grad, {rows, vocab}), view(bad_targets, {rows}), view(mask, {rows}), 1.0f); },
               "cross_entropy target == vocab");
}

BOOST_AUTO_TEST_CASE(dropout_masks_are_reproducible_and_position_keyed) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 64, cols = 100;
  const float p = 0.3f;
  const zt::RngKey key{1234, zt::rng_stream(zt::RngPurpose::LoraDropout, 3), 7};
  std::vector<float> in = random_floats(static_cast<size_t>(rows * cols), 28u, 0.5f, 1.5f);  // nonzero
  std::vector<int64_t> row_ids(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) row_ids[static_cast<size_t>(n)] = 1000 + 3 * n;
  std::vector<float> out(in.size());
  poison(out);
  backend->dropout(view(out, {rows, cols}), view(in, {rows, cols}), p, key, view(row_ids, {rows}));
  const float keep_scale = 1.0f / (1.0f - p);
  size_t kept = 0;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(n * cols + c);
      const uint64_t index = static_cast<uint64_t>(row_ids[static_cast<size_t>(n)] * cols + c);
      const bool keep = zt::rng_uniform(key, index) >= p;
      BOOST_TEST(out[i] == (keep ? in[i] * keep_scale : 0.0f));
      kept += keep;
    }
  }
  const double keep_fraction = static_cast<double>(kept) / static_cast<double>(in.size());
  BOOST_TEST(std::fabs(keep_fraction - (1.0 - p)) < 0.02, "keep fraction " << keep_fraction);  // ~3.5 sigma

  // Reversed rows with their row ids: the same masks, in reversed positions.
  std::vector<float> in_reversed(in.size()), out_reversed(in.size());
  std::vector<int64_t> ids_reversed(row_ids.rbegin(), row_ids.rend());
  for (int64_t n = 0; n < rows; ++n) {
    std::copy_n(in.begin() + (rows - 1 - n) * cols, cols, in_reversed.begin() + n * cols);
  }
  poison(out_reversed);
  backend->dropout(view(out_reversed, {rows, cols}), view(in_reversed, {rows, cols}), p, key,
                   view(ids_reversed, {rows}));
  for (int64_t n = 0; n < rows; ++n) {
    BOOST_TEST(std::equal(out_reversed.begin() + n * cols, out_reversed.begin() + (n + 1) * cols,
                          out.begin() + (rows - 1 - n) * cols),
               "row " << n << " of the reversed batch");
  }
  // The same row id at two positions gives the same mask; in place (out aliases in) works.
  std::vector<float> twin(static_cast<size_t>(2 * cols), 1.0f);
  std::vector<int64_t> twin_ids = {42, 42};
  backend->dropout(view(twin, {2, cols}), view(twin, {2, cols}), p, key, view(twin_ids, {2}));
  BOOST_TEST(std::equal(twin.begin(), twin.begin() + cols, twin.begin() + cols));
  // Another step draws another mask.
  zt::RngKey next_step = key;
  next_step.step += 1;
  std::vector<float> out_next(in.size());
  backend->dropout(view(out_next, {rows, cols}), view(in, {rows, cols}), p, next_step, view(row_ids, {rows}));
  BOOST_TEST(out_next != out);
  // p = 0 is the identity; p = 1 is rejected.
  poison(out);
  backend->dropout(view(out, {rows, cols}), view(in, {rows, cols}), 0.0f, key, view(row_ids, {rows}));
  BOOST_TEST(out == in);
  check_throws([&] { backend->dropout(view(out, {rows, cols}), view(in, {rows, cols}), 1.0f, key, view(row_ids, {rows})); },
               "dropout p = 1");
}

BOOST_AUTO_TEST_CASE(adamw_matches_double_loop) {
  auto backend = zt::make_cpu_backend();
  const int64_t n = 37;
  for (bool bias_correction : {true, false}) {
    zt::AdamWParams params;
    params.lr = 1e-2;
    params.beta1 = 0.9;
    params.beta2 = 0.99;
    params.eps = 1e-6;
    params.weight_decay = 0.1;
    params.bias_correction = bias_correction;
    std::vector<float> param = random_floats(static_cast<size_t>(n), 29u), exp_avg(static_cast<size_t>(n), 0.0f),
                       exp_avg_sq(static_cast<size_t>(n), 0.0f);
    std::vector<double> p = to_double(param), m(static_cast<size_t>(n), 0.0), v(static_cast<size_t>(n), 0.0);
    const double lr = params.lr, b1 = params.beta1, b2 = params.beta2, eps = params.eps, wd = params.weight_decay;
    for (int64_t step = 1; step <= 5; ++step) {
      std::vector<float> grad = random_floats(static_cast<size_t>(n), 30u + static_cast<uint32_t>(step));
      params.step = step;
      backend->optimizer_kernels().adamw(view(param, {n}), view(grad, {n}), view(exp_avg, {n}), view(exp_avg_sq, {n}),
                                         params);
      const double correction1 = bias_correction ? 1.0 - std::pow(b1, static_cast<double>(step)) : 1.0;
      const double correction2 = bias_correction ? 1.0 - std::pow(b2, static_cast<double>(step)) : 1.0;
      for (size_t i = 0; i < p.size(); ++i) {
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
        v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
        const double denom = std::sqrt(v[i]) / std::sqrt(correction2) + eps;
        p[i] -= lr / correction1 * m[i] / denom;
      }
      const std::string when = std::string(bias_correction ? "bias-corrected" : "uncorrected") +
                               " step " + std::to_string(step);
      check_close(param, p, 2e-6, 1e-7, "adamw param, " + when);
      check_close(exp_avg, m, 2e-6, 1e-8, "adamw exp_avg, " + when);
      check_close(exp_avg_sq, v, 2e-6, 1e-9, "adamw exp_avg_sq, " + when);
    }
  }
  std::vector<float> x(4, 1.0f);
  zt::AdamWParams step_zero;
  step_zero.step = 0;
  check_throws(
      [&] { backend->optimizer_kernels().adamw(view(x, {4}), view(x, {4}), view(x, {4}), view(x, {4}), step_zero); },
      "adamw step 0");
}

BOOST_AUTO_TEST_CASE(adamw_matches_torch) {
  // Three steps of torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1,
  // foreach=False) in fp32 (torch 2.x), printed with float.hex(). param and exp_avg_sq: the same
  // result to within one ulp. exp_avg: torch's CPU lerp_ is a fused multiply-add (ATen's
  // lerp_vec: fmadd(weight, end - start, start)), while cpu_adamw rounds the product and the sum
  // apart, as the CUDA kernel does, so that every ISA path gives the same bits (cpu_adam.h);
  // where m nearly cancels (elements 0 and 2) that is a few ulps of m, far under an ulp of g.
  auto backend = zt::make_cpu_backend();
  std::vector<float> param = {0.5f, -1.25f, 3.0f, 1e-3f, -2e-2f, 0.75f, 10.0f, -0.1f};
  const std::vector<std::vector<float>> grads = {{0.1f, -0.2f, 0.3f, 1e-4f, 5.0f, -0.05f, 0.01f, 2.0f},
                                                 {-0.3f, 0.1f, 0.25f, -1e-4f, 4.0f, 0.07f, -0.02f, -1.0f},
                                                 {0.2f, 0.2f, -0.4f, 2e-4f, -3.0f, 0.0f, 0.03f, 0.5f}};
  const std::vector<float> torch_param = {0x1.f91beep-2f, -0x1.3c80c6p+0f, 0x1.7c346cp+1f, -0x1.b858f8p-7f,
                                          -0x1.686874p-5f, 0x1.81ff1cp-1f, 0x1.3eba92p+3f, -0x1.da17c2p-4f};
  const std::vector<float> torch_exp_avg = {0x1.205bccp-10f, 0x1.a36e30p-7f, 0x1.bda50ap-8f, 0x1.4071e0p-16f,
                                            0x1.dc28f8p-2f, 0x1.26e978p-9f, 0x1.077468p-9f, 0x1.f3b646p-4f};
  const std::vector<float> torch_exp_avg_sq = {0x1.255ee2p-13f, 0x1.791c2cp-14f, 0x1.476d04p-12f, 0x1.07c03ap-34f,
                                               0x1.990f40p-5f, 0x1.eff100p-18f, 0x1.77a60cp-20f, 0x1.577976p-8f};
  std::vector<float> exp_avg(8, 0.0f), exp_avg_sq(8, 0.0f);
  zt::AdamWParams params;
  params.lr = 1e-2;
  params.beta1 = 0.9;
  params.beta2 = 0.999;
  params.eps = 1e-8;
  params.weight_decay = 0.1;
  for (size_t step = 0; step < grads.size(); ++step) {
    std::vector<float> grad = grads[step];
    params.step = static_cast<int64_t>(step) + 1;
    backend->optimizer_kernels().adamw(view(param, {8}), view(grad, {8}), view(exp_avg, {8}), view(exp_avg_sq, {8}), params);
  }
  auto within_one_ulp = [](float a, float b) { return a == b || std::nextafter(a, b) == b; };
  for (size_t i = 0; i < 8; ++i) {
    BOOST_TEST(within_one_ulp(param[i], torch_param[i]), "param[" << i << "] " << param[i] << " vs torch " << torch_param[i]);
    BOOST_TEST((within_one_ulp(exp_avg[i], torch_exp_avg[i]) || std::fabs(exp_avg[i] - torch_exp_avg[i]) <= 5e-9f),
               "exp_avg[" << i << "] " << exp_avg[i] << " vs torch " << torch_exp_avg[i]);
    BOOST_TEST(within_one_ulp(exp_avg_sq[i], torch_exp_avg_sq[i]), "exp_avg_sq[" << i << "]");
  }
}

BOOST_AUTO_TEST_CASE(sum_squares_and_inf_nan_check) {
  auto backend = zt::make_cpu_backend();
  std::vector<float> x = random_floats(100003, 31u, -3.0f, 3.0f);  // several chunks
  double expected = 0.0;
  for (float value : x) expected += static_cast<double>(value) * value;
  BOOST_TEST(backend->sum_squares(view(x, {100003})) == expected, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!backend->has_inf_or_nan(view(x, {100003})));
  x[50] = std::numeric_limits<float>::max();
  BOOST_TEST(!backend->has_inf_or_nan(view(x, {100003})), "max finite is finite");
  for (float bad : {kInf, -kInf, kNaN, -kNaN}) {
    for (size_t where : {size_t{0}, size_t{77777}, size_t{100002}}) {
      std::vector<float> y = x;
      y[where] = bad;
      BOOST_TEST(backend->has_inf_or_nan(view(y, {100003})), bad << " at " << where);
    }
  }
  std::vector<float> small = {1.0f, 2.0f, kNaN};
  BOOST_TEST(backend->has_inf_or_nan(view(small, {3})));
}

BOOST_AUTO_TEST_CASE(copy_converts_between_float_formats) {
  auto backend = zt::make_cpu_backend();
  std::vector<float> x = random_floats(1000, 32u, -70000.0f, 70000.0f);
  x[0] = kNaN;
  x[1] = -kInf;
  x[2] = 1e-7f;   // an fp16 subnormal
  x[3] = 65520.0f;  // rounds to fp16 inf
  for (zt::DType half : {zt::DType::BF16, zt::DType::F16}) {
    std::vector<uint16_t> bits(x.size(), 0xFFFF);
    backend->copy(half_view(bits, half), view(x, {1000}));
    std::vector<float> back(x.size());
    poison(back);
    backend->copy(view(back, {1000}), half_view(bits, half));
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t expected_bits = half == zt::DType::BF16 ? zt::float_to_bf16(x[i]) : zt::float_to_fp16(x[i]);
      BOOST_TEST(bits[i] == expected_bits);
      const float expected = zt::round_to(half, x[i]);
      BOOST_TEST((back[i] == expected || (std::isnan(back[i]) && std::isnan(expected))));
    }
  }
  // bf16 -> fp16 and back: through fp32, one rounding.
  std::vector<uint16_t> bf16(x.size()), fp16(x.size(), 0xFFFF), bf16_again(x.size(), 0xFFFF);
  for (size_t i = 0; i < x.size(); ++i) bf16[i] = zt::float_to_bf16(x[i]);
  backend->copy(half_view(fp16, zt::DType::F16), half_view(bf16, zt::DType::BF16));
  backend->copy(half_view(bf16_again, zt::DType::BF16), half_view(fp16, zt::DType::F16));
  for (size_t i = 0; i < x.size(); ++i) {
    BOOST_TEST(fp16[i] == zt::float_to_fp16(zt::bf16_to_float(bf16[i])));
    BOOST_TEST(bf16_again[i] == zt::float_to_bf16(zt::fp16_to_float(fp16[i])));
  }
  // Same dtype: a plain copy, also for integers; other conversions are errors.
  std::vector<int32_t> ids = {1, 2, 3}, ids_copy(3, 0);
  backend->copy(view(ids_copy, {3}), view(ids, {3}));
  BOOST_TEST(ids_copy == ids);
  std::vector<float> three(3);
  check_throws([&] { backend->copy(view(three, {3}), view(ids, {3})); }, "copy int32 -> fp32");
  check_throws([&] { backend->copy(view(three, {3}), view(x, {1000})); }, "copy with different numel");
}

BOOST_AUTO_TEST_CASE(fill_scale_accumulate) {
  auto backend = zt::make_cpu_backend();
  std::vector<float> x(50000);
  poison(x);
  backend->fill(view(x, {50000}), 2.5f);
  BOOST_TEST(std::all_of(x.begin(), x.end(), [](float value) { return value == 2.5f; }));
  std::vector<uint16_t> half(5, 0);
  backend->fill(half_view(half, zt::DType::BF16), 1.1f);
  BOOST_TEST(half[4] == zt::float_to_bf16(1.1f));
  backend->fill(half_view(half, zt::DType::F16), -3.3f);
  BOOST_TEST(half[0] == zt::float_to_fp16(-3.3f));
  std::vector<int32_t> ids(4, 0);
  backend->fill(view(ids, {4}), -7.0f);
  BOOST_TEST(ids == std::vector<int32_t>(4, -7));
  std::vector<uint8_t> mask(4, 0);
  backend->fill(view(mask, {4}), 1.0f);
  BOOST_TEST(mask == std::vector<uint8_t>(4, 1));
  check_throws([&] { backend->fill(view(ids, {4}), 0.5f); }, "fill int32 with 0.5");
  check_throws([&] { backend->fill(view(mask, {4}), 256.0f); }, "fill uint8 with 256");

  std::vector<float> y = random_floats(50000, 33u), z = random_floats(50000, 34u);
  std::vector<double> expected(y.size());
  for (size_t i = 0; i < y.size(); ++i) expected[i] = (static_cast<double>(y[i]) + 0.5 * z[i]) * -3.0;
  backend->accumulate(view(y, {50000}), view(z, {100, 500}), 0.5f);  // same numel, other shape
  backend->scale(view(y, {50000}), -3.0f);
  check_close(y, expected, 1e-6, 1e-7, "accumulate then scale");
  std::vector<float> residual = {1.0f, 2.0f}, branch = {0.25f, -4.0f};
  backend->accumulate(view(residual, {2}), view(branch, {2}), 1.0f);
  BOOST_TEST(residual == (std::vector<float>{1.25f, -2.0f}));
}

BOOST_AUTO_TEST_CASE(mismatched_arguments_throw) {
  auto backend = zt::make_cpu_backend();
  std::vector<float> a(12), b(12), c(16), w(4), stats(3);
  std::vector<int32_t> ints(12);
  check_throws([&] { backend->matmul(view(c, {4, 4}), view(a, {4, 3}), false, view(b, {4, 3}), false, 1.0f, 0.0f); },
               "matmul inner dimensions differ");
  check_throws([&] { backend->matmul(view(c, {4, 4}), view(a, {4, 3}), false, view(b, {3, 4}), true, 1.0f, 0.0f); },
               "matmul transposed b of the wrong shape");
  check_throws([&] { backend->accumulate(view(a, {12}), view(ints, {12}), 1.0f); }, "accumulate int32 into fp32");
  check_throws([&] { backend->accumulate(view(a, {12}), view(c, {16}), 1.0f); }, "accumulate with other numel");
  check_throws([&] { backend->rmsnorm_forward(view(a, {3, 4}), view(stats, {3}), view(b, {3, 4}), view(stats, {3}), 1e-5f); },
               "rmsnorm weight of the wrong size");
  check_throws([&] { backend->rmsnorm_forward(view(a, {3, 4}), view(w, {4}), view(b, {3, 4}), view(w, {4}), 1e-5f); },
               "rmsnorm rstd of the wrong size");
  check_throws([&] { backend->rmsnorm_forward(view(a, {4, 3}), view(stats, {3}), view(b, {3, 4}), view(w, {4}), 1e-5f); },
               "rmsnorm y and x of different shapes");
  std::vector<uint16_t> half(12);
  check_throws([&] { backend->relu_forward(half_view(half, zt::DType::BF16), view(a, {12})); }, "relu with y bf16 and x fp32");
  check_throws([&] { backend->add_bias(view(a, {3, 4}), view(stats, {3})); }, "add_bias of the wrong size");
  check_throws([&] { backend->swiglu_forward(view(a, {12}), view(b, {12}), view(c, {16})); }, "swiglu up of another shape");
  // Attention: H not a multiple of Hkv, and lse of the wrong shape.
  std::vector<float> q(1 * 2 * 3 * 4), kv(1 * 2 * 2 * 4), out(q.size()), lse(6);
  check_throws([&] { backend->attention_forward(view(out, {1, 2, 3, 4}), view(lse, {1, 3, 2}), view(q, {1, 2, 3, 4}),
                                                view(kv, {1, 2, 2, 4}), view(kv, {1, 2, 2, 4}), Tensor(), 0.5f); },
               "attention H=3, Hkv=2");
  std::vector<float> kv1(1 * 2 * 1 * 4);
  check_throws([&] { backend->attention_forward(view(out, {1, 2, 3, 4}), view(lse, {1, 2, 3}), view(q, {1, 2, 3, 4}),
                                                view(kv1, {1, 2, 1, 4}), view(kv1, {1, 2, 1, 4}), Tensor(), 0.5f); },
               "attention lse [B, T, H] instead of [B, H, T]");
  check_throws([&] { backend->rope_forward(view(q, {1, 2, 3, 4}), view(w, {4}), Tensor()); }, "rope inv_freq of D elements");
  std::vector<uint8_t> mask(3, 1);
  std::vector<int32_t> targets(4, 0);
  check_throws([&] { backend->cross_entropy(view(a, {3, 4}), view(targets, {4}), view(mask, {3}), 1.0f); },
               "cross_entropy targets of the wrong size");
}

BOOST_AUTO_TEST_CASE(vector_exp_is_accurate) {
  // The vectorisable exp used by softmax, cross-entropy and SiLU: within 3 ulp of exp.
  double worst = 0.0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 200000.0f;
    const double expected = std::exp(static_cast<double>(x));
    const double relative = std::fabs(zt::cpu::vector_exp(x) - expected) / expected;
    worst = std::max(worst, relative);
  }
  BOOST_TEST(worst < 3.0 * 5.96e-8, "worst relative error " << worst);
  BOOST_TEST(zt::cpu::vector_exp(0.0f) == 1.0f);
  BOOST_TEST(zt::cpu::vector_exp(-kInf) == 0.0f);
  BOOST_TEST(zt::cpu::vector_exp(-100.0f) == 0.0f);
  BOOST_TEST(zt::cpu::vector_exp(100.0f) == kInf);
  BOOST_TEST(zt::cpu::vector_exp(kInf) == kInf);
  BOOST_TEST(std::isnan(zt::cpu::vector_exp(kNaN)));
  BOOST_TEST(zt::cpu::vector_sigmoid(-200.0f) == 0.0f);
  BOOST_TEST(zt::cpu::vector_sigmoid(200.0f) == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
