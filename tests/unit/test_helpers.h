// Shared helpers of the backend unit tests: random fills, NaN poisoning, tensor views of
// std::vectors, closeness checks that name the worst element, and central finite differences.
#pragma once
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zt::test {

// n floats uniform in [low, high), reproducible from `seed`.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float low = -1.0f,
                                        float high = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(engine);
  return values;
}

// n int32 values uniform in [0, bound), reproducible from `seed`.
inline std::vector<int32_t> random_ids(size_t n, uint32_t seed, int32_t bound) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int32_t> distribution(0, bound - 1);
  std::vector<int32_t> values(n);
  for (int32_t& value : values) value = distribution(engine);
  return values;
}

// Fills an output with NaN before an op writes it, so an element it forgets shows up.
inline void poison(std::vector<float>& values) {
  for (float& value : values) value = std::numeric_limits<float>::quiet_NaN();
}

template <class T>
DType dtype_of();
template <>
inline DType dtype_of<float>() { return DType::F32; }
template <>
inline DType dtype_of<int32_t>() { return DType::I32; }
template <>
inline DType dtype_of<int64_t>() { return DType::I64; }
template <>
inline DType dtype_of<uint8_t>() { return DType::U8; }

// A host view of a vector with the given shape (must match the vector's size).
template <class T>
Tensor view(std::vector<T>& values, std::initializer_list<int64_t> shape) {
  Tensor tensor(values.data(), dtype_of<T>(), shape);
  BOOST_REQUIRE_EQUAL(static_cast<size_t>(tensor.numel()), values.size());
  return tensor;
}

// Checks |actual - expected| <= atol + rtol |expected| everywhere (NaN fails); on failure
// reports the element that is furthest outside, with `what` naming the quantity.
template <class Actual, class Expected>
void check_close(const std::vector<Actual>& actual, const std::vector<Expected>& expected,
                 double rtol, double atol, const std::string& what) {
  BOOST_REQUIRE_EQUAL(actual.size(), expected.size());
  size_t worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  size_t failures = 0;
  double largest_difference = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    const double e = static_cast<double>(expected[i]);
    largest_difference = std::max(largest_difference, std::fabs(a - e));
    double excess = std::fabs(a - e) - (atol + rtol * std::fabs(e));
    if (std::isnan(excess)) excess = std::numeric_limits<double>::infinity();  // NaN is bad
    if (excess > 0.0) ++failures;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  BOOST_TEST_MESSAGE(what << ": largest |actual - expected| = " << largest_difference);
  BOOST_TEST(failures == 0u, what << ": " << failures << " of " << actual.size()
                                  << " elements differ; worst [" << worst << "] got "
                                  << static_cast<double>(actual[worst]) << ", expected "
                                  << static_cast<double>(expected[worst]) << " (rtol " << rtol
                                  << ", atol " << atol << ")");
}

// sum(out * weights) in double: the scalar loss whose gradients the layer tests check.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& weights) {
  double total = 0.0;
  for (size_t i = 0; i < out.size(); ++i) total += static_cast<double>(out[i]) * weights[i];
  return total;
}

// dL/dx[i] for every i by central differences (L(x + h e_i) - L(x - h e_i)) / 2h, where `loss`
// recomputes L from the current contents of x. x is restored afterwards.
inline std::vector<double> numeric_gradient(std::vector<float>& x,
                                            const std::function<double()>& loss, float step) {
  std::vector<double> gradient(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + step;
    const double plus = loss();
    x[i] = saved - step;
    const double minus = loss();
    x[i] = saved;
    // Divide by the step actually taken (x +- h is rounded to float).
    const double taken = static_cast<double>(saved + step) - static_cast<double>(saved - step);
    gradient[i] = (plus - minus) / taken;
  }
  return gradient;
}

}  // namespace zt::test
