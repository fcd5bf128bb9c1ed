// Unit tests of every backward op of the CPU backend against central finite differences of the
// scalar loss L = sum(out * R) (R a fixed random tensor, so dL/dout = R), where out is
// recomputed with the backend's own fp32 forward and L is accumulated in double. Parameter
// gradients are checked to accumulate (+=) onto what was there, and empty (frozen) parameter
// gradient views to be skipped.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "test_helpers.h"
#include "test_util.h"

namespace {

using zt::GradStore;
using zt::Tensor;
using zt::test::numeric_gradient;
using zt::test::random_floats;
using zt::test::view;
using zt::test::weighted_sum;

// Finite-difference step for fp32 forwards of O(1) inputs. Truncation error of central
// differences is h^2/6 |f'''| ~ 2e-5; rounding error is ~ (ulp of the outputs that change)
// * |R| / h ~ 1e-7 * n_changed / 1e-2 ~ 1e-5 (outputs that do not change cancel exactly, as the
// forward is deterministic). The largest difference seen on these sizes is 3.3e-5 (attention dk).
constexpr float kStep = 1e-2f;
// Hence an analytic gradient must match to 3e-4 absolute plus 3e-3 relative: about ten times the
// worst FD error, while a wrong term (a missing factor, a dropped O(0.1) contribution) misses
// by orders of magnitude more.
constexpr double kRelativeTolerance = 3e-3;
constexpr double kAbsoluteTolerance = 3e-4;

void check_gradient(const std::vector<float>& analytic, const std::vector<double>& numeric,
                    const std::string& what) {
  zt::test::check_close(analytic, numeric, kRelativeTolerance, kAbsoluteTolerance, what);
  // Guard against a vacuous pass: the gradient must not be all zeros.
  const double largest = std::fabs(*std::max_element(numeric.begin(), numeric.end(), [](double a, double b) {
    return std::fabs(a) < std::fabs(b);
  }));
  BOOST_TEST(largest > 1e-2, what << ": the numeric gradient is not trivially small (" << largest << ")");
}

// after - before, element by element (what a += backward added).
std::vector<float> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> difference(after.size());
  for (size_t i = 0; i < after.size(); ++i) difference[i] = after[i] - before[i];
  return difference;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layer_grads)

BOOST_AUTO_TEST_CASE(attention_backward_matches_finite_differences) {
  auto backend = zt::make_cpu_backend();
  struct Sizes { int64_t batch, time, heads, kv_heads, head_dim; };
  // GQA across two query blocks (T = 70 > 64), and plain multi-head.
  for (const Sizes& s : {Sizes{1, 70, 2, 1, 4}, Sizes{2, 9, 2, 2, 4}}) {
    const std::string name = "attention T=" + std::to_string(s.time) + " H=" + std::to_string(s.heads) +
                             " Hkv=" + std::to_string(s.kv_heads);
    const size_t q_size = static_cast<size_t>(s.batch * s.time * s.heads * s.head_dim);
    const size_t kv_size = static_cast<size_t>(s.batch * s.time * s.kv_heads * s.head_dim);
    std::vector<float> q = random_floats(q_size, 40u), k = random_floats(kv_size, 41u),
                       v = random_floats(kv_size, 42u), weights = random_floats(q_size, 43u);
    std::vector<float> out(q_size), lse(static_cast<size_t>(s.batch * s.heads * s.time));
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    auto q_view = [&] { return view(q, {s.batch, s.time, s.heads, s.head_dim}); };
    auto kv_view = [&](std::vector<float>& x) { return view(x, {s.batch, s.time, s.kv_heads, s.head_dim}); };
    auto loss = [&] {
      backend->attention_forward(view(out, {s.batch, s.time, s.heads, s.head_dim}), view(lse, {s.batch, s.heads, s.time}),
                                 q_view(), kv_view(k), kv_view(v), zt::Tensor(), scale);
      return weighted_sum(out, weights);
    };
    loss();
    std::vector<float> dq(q_size), dk(kv_size), dv(kv_size);
    backend->attention_backward(view(dq, {s.batch, s.time, s.heads, s.head_dim}), kv_view(dk), kv_view(dv),
                                view(weights, {s.batch, s.time, s.heads, s.head_dim}), q_view(), kv_view(k),
                                kv_view(v), view(out, {s.batch, s.time, s.heads, s.head_dim}),
                                view(lse, {s.batch, s.heads, s.time}), zt::Tensor(), scale);
    check_gradient(dq, numeric_gradient(q, loss, kStep), name + " dq");
    check_gradient(dk, numeric_gradient(k, loss, kStep), name + " dk");
    check_gradient(dv, numeric_gradient(v, loss, kStep), name + " dv");
  }
}

BOOST_AUTO_TEST_CASE(rmsnorm_backward_matches_finite_differences) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 3, cols = 16;
  std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 44u);
  std::vector<float> weight = random_floats(static_cast<size_t>(cols), 45u, 0.5f, 1.5f);
  std::vector<float> weights = random_floats(x.size(), 46u);
  std::vector<float> y(x.size()), rstd(static_cast<size_t>(rows));
  auto loss = [&] {
    backend->rmsnorm_forward(view(y, {rows, cols}), view(rstd, {rows}), view(x, {rows, cols}), view(weight, {cols}), 1e-5f);
    return weighted_sum(y, weights);
  };
  loss();
  const std::vector<float> dweight_before = random_floats(static_cast<size_t>(cols), 47u);
  std::vector<float> dx(x.size()), dweight = dweight_before;
  backend->rmsnorm_backward(view(dx, {rows, cols}), GradStore::Write, view(dweight, {cols}), view(weights, {rows, cols}),
                            view(x, {rows, cols}), view(weight, {cols}), view(rstd, {rows}));
  check_gradient(dx, numeric_gradient(x, loss, kStep), "rmsnorm dx");
  check_gradient(added(dweight, dweight_before), numeric_gradient(weight, loss, kStep), "rmsnorm dweight (+=)");
  // Frozen weight: dx is the same.
  std::vector<float> dx_frozen(x.size());
  backend->rmsnorm_backward(view(dx_frozen, {rows, cols}), GradStore::Write, Tensor(), view(weights, {rows, cols}),
                            view(x, {rows, cols}), view(weight, {cols}), view(rstd, {rows}));
  BOOST_TEST(dx_frozen == dx);
  // dx += (the residual stream's gradient): what is added is the gradient.
  const std::vector<float> residual_before = random_floats(x.size(), 147u);
  std::vector<float> residual = residual_before;
  backend->rmsnorm_backward(view(residual, {rows, cols}), GradStore::Add, Tensor(), view(weights, {rows, cols}),
                            view(x, {rows, cols}), view(weight, {cols}), view(rstd, {rows}));
  check_gradient(added(residual, residual_before), numeric_gradient(x, loss, kStep), "rmsnorm dx (+=)");
}

BOOST_AUTO_TEST_CASE(layernorm_backward_matches_finite_differences) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 3, cols = 16;
  std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 48u, -1.0f, 2.0f);
  std::vector<float> weight = random_floats(static_cast<size_t>(cols), 49u, 0.5f, 1.5f);
  std::vector<float> bias = random_floats(static_cast<size_t>(cols), 50u);
  std::vector<float> weights = random_floats(x.size(), 51u);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  auto loss = [&] {
    backend->layernorm_forward(view(y, {rows, cols}), view(mean, {rows}), view(rstd, {rows}), view(x, {rows, cols}),
                               view(weight, {cols}), view(bias, {cols}), 1e-5f);
    return weighted_sum(y, weights);
  };
  loss();
  const std::vector<float> dweight_before = random_floats(static_cast<size_t>(cols), 52u);
  const std::vector<float> dbias_before = random_floats(static_cast<size_t>(cols), 53u);
  std::vector<float> dx(x.size()), dweight = dweight_before, dbias = dbias_before;
  backend->layernorm_backward(view(dx, {rows, cols}), GradStore::Write, view(dweight, {cols}), view(dbias, {cols}),
                              view(weights, {rows, cols}), view(x, {rows, cols}), view(weight, {cols}),
                              view(mean, {rows}), view(rstd, {rows}));
  check_gradient(dx, numeric_gradient(x, loss, kStep), "layernorm dx");
  check_gradient(added(dweight, dweight_before), numeric_gradient(weight, loss, kStep), "layernorm dweight (+=)");
  check_gradient(added(dbias, dbias_before), numeric_gradient(bias, loss, kStep), "layernorm dbias (+=)");
  std::vector<float> dx_frozen(x.size());
  backend->layernorm_backward(view(dx_frozen, {rows, cols}), GradStore::Write, Tensor(), Tensor(),
                              view(weights, {rows, cols}), view(x, {rows, cols}), view(weight, {cols}),
                              view(mean, {rows}), view(rstd, {rows}));
  BOOST_TEST(dx_frozen == dx);
  const std::vector<float> residual_before = random_floats(x.size(), 153u);
  std::vector<float> residual = residual_before;
  backend->layernorm_backward(view(residual, {rows, cols}), GradStore::Add, Tensor(), Tensor(),
                              view(weights, {rows, cols}), view(x, {rows, cols}), view(weight, {cols}),
                              view(mean, {rows}), view(rstd, {rows}));
  check_gradient(added(residual, residual_before), numeric_gradient(x, loss, kStep), "layernorm dx (+=)");
  // dx += in place on dy would read what it writes: refused.
  zt::test::check_error_mentions(
      [&] {
        backend->layernorm_backward(view(weights, {rows, cols}), GradStore::Add, Tensor(), Tensor(),
                                    view(weights, {rows, cols}), view(x, {rows, cols}), view(weight, {cols}),
                                    view(mean, {rows}), view(rstd, {rows}));
      },
      {"layernorm_backward", "aliases dy"});
}

BOOST_AUTO_TEST_CASE(rope_backward_matches_finite_differences) {
  auto backend = zt::make_cpu_backend();
  const int64_t batch = 2, time = 5, heads = 2, head_dim = 8;
  std::vector<float> inv_freq = {1.0f, 0.3f, 0.1f, 0.01f};
  std::vector<float> x = random_floats(static_cast<size_t>(batch * time * heads * head_dim), 54u);
  std::vector<float> weights = random_floats(x.size(), 55u);
  std::vector<float> rotated(x.size());
  auto loss = [&] {
    rotated = x;
    backend->rope_forward(view(rotated, {batch, time, heads, head_dim}), view(inv_freq, {4}), zt::Tensor());
    return weighted_sum(rotated, weights);
  };
  std::vector<float> dx = weights;  // in place: dout -> dx
  backend->rope_backward(view(dx, {batch, time, heads, head_dim}), view(inv_freq, {4}), zt::Tensor());
  check_gradient(dx, numeric_gradient(x, loss, kStep), "rope dx");
}

BOOST_AUTO_TEST_CASE(swiglu_and_relu_backward_match_finite_differences) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 4, cols = 10;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> gate = random_floats(n, 56u, -4.0f, 4.0f), up = random_floats(n, 57u, -2.0f, 2.0f);
  std::vector<float> weights = random_floats(n, 58u), h(n);
  auto swiglu_loss = [&] {
    backend->swiglu_forward(view(h, {rows, cols}), view(gate, {rows, cols}), view(up, {rows, cols}));
    return weighted_sum(h, weights);
  };
  std::vector<float> dgate(n), dup(n);
  backend->swiglu_backward(view(dgate, {rows, cols}), view(dup, {rows, cols}), view(weights, {rows, cols}),
                           view(gate, {rows, cols}), view(up, {rows, cols}));
  check_gradient(dgate, numeric_gradient(gate, swiglu_loss, kStep), "swiglu dgate");
  check_gradient(dup, numeric_gradient(up, swiglu_loss, kStep), "swiglu dup");

  // ReLU: inputs kept away from the kink at 0 by more than the step.
  std::vector<float> x = random_floats(n, 59u, 0.1f, 1.0f);
  for (size_t i = 0; i < n; i += 2) x[i] = -x[i];
  std::vector<float> y(n);
  auto relu_loss = [&] {
    backend->relu_forward(view(y, {rows, cols}), view(x, {rows, cols}));
    return weighted_sum(y, weights);
  };
  relu_loss();
  std::vector<float> dx(n);
  backend->relu_backward(view(dx, {rows, cols}), view(weights, {rows, cols}), view(y, {rows, cols}));
  check_gradient(dx, numeric_gradient(x, relu_loss, kStep), "relu dx");
}

BOOST_AUTO_TEST_CASE(cross_entropy_gradient_matches_finite_differences) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 4, vocab = 11;
  std::vector<float> logits = random_floats(static_cast<size_t>(rows * vocab), 60u, -3.0f, 3.0f);
  std::vector<int32_t> targets = {3, 0, 10, 7};
  std::vector<uint8_t> mask = {1, 0, 1, 1};
  const float grad_scale = 1.0f / 3.0f;  // 1 / target tokens
  auto loss = [&] {
    std::vector<float> scratch = logits;
    return grad_scale * backend->cross_entropy(view(scratch, {rows, vocab}), view(targets, {rows}), view(mask, {rows}), 0.0f);
  };
  std::vector<float> dlogits = logits;
  backend->cross_entropy(view(dlogits, {rows, vocab}), view(targets, {rows}), view(mask, {rows}), grad_scale);
  check_gradient(dlogits, numeric_gradient(logits, loss, kStep), "cross_entropy dlogits");
}

BOOST_AUTO_TEST_CASE(embedding_and_linear_backward_match_finite_differences) {
  auto backend = zt::make_cpu_backend();
  // Embedding with repeated ids: dtable += scatter.
  const int64_t vocab = 5, cols = 6, rows = 7;
  std::vector<float> table = random_floats(static_cast<size_t>(vocab * cols), 61u);
  std::vector<int32_t> ids = {2, 4, 2, 0, 2, 4, 1};
  std::vector<float> weights = random_floats(static_cast<size_t>(rows * cols), 62u), out(weights.size());
  auto embedding_loss = [&] {
    backend->embedding_forward(view(out, {rows, cols}), view(table, {vocab, cols}), view(ids, {rows}));
    return weighted_sum(out, weights);
  };
  const std::vector<float> dtable_before = random_floats(table.size(), 63u);
  std::vector<float> dtable = dtable_before;
  backend->embedding_backward(view(dtable, {vocab, cols}), view(weights, {rows, cols}), view(ids, {rows}));
  std::vector<double> numeric = numeric_gradient(table, embedding_loss, kStep);
  zt::test::check_close(added(dtable, dtable_before), numeric, kRelativeTolerance, kAbsoluteTolerance,
                        "embedding dtable (+=)");
  for (size_t i = 3 * static_cast<size_t>(cols); i < 4 * static_cast<size_t>(cols); ++i) {
    BOOST_TEST(dtable[i] == dtable_before[i], "id 3 is unused: its row is untouched");
  }

  // Linear layer y[N,O] = x[N,I] W[O,I]^T + b[O]: dx = dy W, dW += dy^T x, db += sum dy.
  const int64_t inputs = 6, outputs = 5;
  std::vector<float> x = random_floats(static_cast<size_t>(rows * inputs), 64u);
  std::vector<float> w = random_floats(static_cast<size_t>(outputs * inputs), 65u);
  std::vector<float> b = random_floats(static_cast<size_t>(outputs), 66u);
  std::vector<float> dy = random_floats(static_cast<size_t>(rows * outputs), 67u), y(dy.size());
  auto linear_loss = [&] {
    backend->matmul(view(y, {rows, outputs}), view(x, {rows, inputs}), false, view(w, {outputs, inputs}), true, 1.0f, 0.0f);
    backend->add_bias(view(y, {rows, outputs}), view(b, {outputs}));
    return weighted_sum(y, dy);
  };
  std::vector<float> dx(x.size());
  const std::vector<float> dw_before = random_floats(w.size(), 68u), db_before = random_floats(b.size(), 69u);
  std::vector<float> dw = dw_before, db = db_before;
  backend->matmul(view(dx, {rows, inputs}), view(dy, {rows, outputs}), false, view(w, {outputs, inputs}), false, 1.0f, 0.0f);
  backend->matmul(view(dw, {outputs, inputs}), view(dy, {rows, outputs}), true, view(x, {rows, inputs}), false, 1.0f, 1.0f);
  backend->bias_backward(view(db, {outputs}), view(dy, {rows, outputs}));
  check_gradient(dx, numeric_gradient(x, linear_loss, kStep), "linear dx");
  check_gradient(added(dw, dw_before), numeric_gradient(w, linear_loss, kStep), "linear dW (+=)");
  check_gradient(added(db, db_before), numeric_gradient(b, linear_loss, kStep), "linear db (+=)");
}

BOOST_AUTO_TEST_CASE(dropout_backward_is_the_same_call) {
  auto backend = zt::make_cpu_backend();
  const int64_t rows = 6, cols = 9;
  const zt::RngKey key{99, zt::rng_stream(zt::RngPurpose::LoraDropout, 0), 1};
  std::vector<int64_t> row_ids = {5, 1, 8, 0, 3, 2};
  std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), 70u);
  std::vector<float> weights = random_floats(x.size(), 71u), y(x.size());
  auto loss = [&] {
    backend->dropout(view(y, {rows, cols}), view(x, {rows, cols}), 0.4f, key, view(row_ids, {rows}));
    return weighted_sum(y, weights);
  };
  std::vector<float> dx = weights;
  backend->dropout(view(dx, {rows, cols}), view(dx, {rows, cols}), 0.4f, key, view(row_ids, {rows}));
  check_gradient(dx, numeric_gradient(x, loss, kStep), "dropout dx");
}

BOOST_AUTO_TEST_SUITE_END()
