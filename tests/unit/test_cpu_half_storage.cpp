// Unit tests of the CPU backend's bf16/fp16 storage: every op, with 16-bit arguments, must give
// bit for bit what the same backend gives on fp32 copies of the widened inputs, with each output
// rounded once to its view's dtype (the reference rounds with backend.copy). Also: the dtype
// combinations the rules refuse throw a zt::Error naming the op and the argument, fp16 overflow
// gives inf, matmul_bias agrees with matmul + add_bias, and make_cpu_backend routes allocations
// through a custom HostAllocator.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "test_helpers.h"
#include "test_util.h"

namespace {

using zt::Backend;
using zt::Buffer;
using zt::DType;
using zt::GradStore;
using zt::Tensor;
using zt::test::random_floats;
using zt::test::random_ids;

constexpr DType kHalfTypes[] = {DType::BF16, DType::F16};

// A tensor of `dtype` and `shape` in memory of `backend` (64-byte aligned, as the staging scratch
// of the CPU backend, so both runs' kernels see the same alignment).
struct HostTensor {
  Buffer buffer;
  Tensor tensor;
};

HostTensor make_tensor(Backend& backend, DType dtype, const std::vector<int64_t>& shape) {
  HostTensor result;
  result.tensor.dtype = dtype;
  result.tensor.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) result.tensor.shape[i] = shape[i];
  result.buffer = Buffer(backend, std::max<size_t>(result.tensor.bytes(), 1));
  result.tensor.data = result.buffer.data();
  return result;
}

// A tensor of `dtype` holding `values` rounded to it (RNE, by backend.copy).
HostTensor stored_tensor(Backend& backend, DType dtype, const std::vector<int64_t>& shape,
                         std::vector<float> values) {
  HostTensor result = make_tensor(backend, dtype, shape);
  BOOST_REQUIRE_EQUAL(static_cast<size_t>(result.tensor.numel()), values.size());
  backend.copy(result.tensor, Tensor(values.data(), DType::F32, {static_cast<int64_t>(values.size())}));
  return result;
}

// The values of a float tensor, widened to fp32.
std::vector<float> to_floats(Backend& backend, const Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.numel()));  // values[numel]
  backend.copy(Tensor(values.data(), DType::F32, {tensor.numel()}), tensor);
  return values;
}

// One float argument of an op call: its storage dtype under test, its shape and its initial
// values (rounded to the dtype when stored). Integer arguments are captured by the call itself.
struct FloatArg {
  const char* name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Runs the op on the arguments in their storage dtypes (in the order of `args`), returning what
// the op returns (0 for void ops).
using OpCall = std::function<double(Backend&, const std::vector<Tensor>&)>;

// Runs `call` once on the stored arguments and once on fp32 copies of their widened values; then
// every argument of the first run must equal, bit for bit, the second run's value rounded to the
// argument's dtype (so outputs are rounded exactly once and inputs are left untouched), and the
// returned values must be identical.
void check_matches_widened_fp32(const std::string& what, const std::vector<FloatArg>& args,
                                const OpCall& call) {
  auto backend = zt::make_cpu_backend();
  std::vector<HostTensor> stored, wide;
  std::vector<Tensor> stored_views, wide_views;
  for (const FloatArg& arg : args) {
    stored.push_back(stored_tensor(*backend, arg.dtype, arg.shape, arg.values));
    wide.push_back(make_tensor(*backend, DType::F32, arg.shape));
    backend->copy(wide.back().tensor, stored.back().tensor);  // exact widening
    stored_views.push_back(stored.back().tensor);
    wide_views.push_back(wide.back().tensor);
  }
  const double stored_result = call(*backend, stored_views);
  const double wide_result = call(*backend, wide_views);
  BOOST_TEST(std::bit_cast<uint64_t>(stored_result) == std::bit_cast<uint64_t>(wide_result),
             what << ": returned " << stored_result << ", fp32 on widened inputs returned " << wide_result);
  for (size_t i = 0; i < args.size(); ++i) {
    const Tensor& got = stored[i].tensor;
    HostTensor expected = make_tensor(*backend, args[i].dtype, args[i].shape);
    backend->copy(expected.tensor, wide[i].tensor);  // the one rounding of the reference
    const size_t element = zt::dtype_size(got.dtype);
    int64_t mismatches = 0, first = -1;
    for (int64_t e = 0; e < got.numel(); ++e) {
      const auto offset = static_cast<size_t>(e) * element;
      if (std::memcmp(static_cast<const char*>(got.data) + offset,
                      static_cast<const char*>(expected.tensor.data) + offset, element) != 0) {
        if (first < 0) first = e;
        ++mismatches;
      }
    }
    if (mismatches > 0) {
      const std::vector<float> got_values = to_floats(*backend, got);
      const std::vector<float> expected_values = to_floats(*backend, expected.tensor);
      const auto at = static_cast<size_t>(first);
      BOOST_ERROR(what << ": " << args[i].name << " " << got.describe() << ": " << mismatches << " of "
                       << got.numel() << " elements differ from the rounded fp32 result; first [" << first
                       << "] got " << got_values[at] << ", expected " << expected_values[at]);
    }
  }
}

std::string case_name(const char* op, DType half, const std::string& detail = "") {
  return std::string(op) + " (" + zt::dtype_name(half) + (detail.empty() ? "" : ", " + detail) + ")";
}

// The other float dtype of a mixed-dtype case: fp32 when `mixed`, else `half`.
DType or_fp32(DType half, bool fp32) { return fp32 ? DType::F32 : half; }

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_half_storage)

BOOST_AUTO_TEST_CASE(elementwise_ops_match_fp32_on_widened_inputs) {
  const int64_t n = 50000;  // above the parallel threshold of the conversions and loops
  for (DType half : kHalfTypes) {
    // accumulate: dst and src each any float; dst is read, then written.
    for (int mix = 0; mix < 3; ++mix) {
      const DType dst_dtype = or_fp32(half, mix == 1), src_dtype = or_fp32(half, mix == 2);
      for (float factor : {1.0f, -0.375f}) {
        check_matches_widened_fp32(
            case_name("accumulate", half,
                      std::string("dst ") + zt::dtype_name(dst_dtype) + ", src " + zt::dtype_name(src_dtype) +
                          ", scale " + std::to_string(factor)),
            {{"dst", dst_dtype, {n}, random_floats(n, 1u)},
             {"src", src_dtype, {100, 500}, random_floats(n, 2u)}},
            [factor](Backend& backend, const std::vector<Tensor>& t) {
              backend.accumulate(t[0], t[1], factor);
              return 0.0;
            });
      }
    }
    // dst += dst: src aliases dst.
    check_matches_widened_fp32(case_name("accumulate", half, "src aliases dst"),
                               {{"dst", half, {n}, random_floats(n, 3u)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.accumulate(t[0], t[0], 0.75f);
                                 return 0.0;
                               });
    check_matches_widened_fp32(case_name("scale", half), {{"dst", half, {n}, random_floats(n, 4u)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.scale(t[0], -1.7f);
                                 return 0.0;
                               });
    check_matches_widened_fp32(
        case_name("sum_squares", half), {{"x", half, {n}, random_floats(n, 5u)}},
        [](Backend& backend, const std::vector<Tensor>& t) { return backend.sum_squares(t[0]); });
    std::vector<float> with_nan = random_floats(n, 6u);
    with_nan[31337] = std::numeric_limits<float>::quiet_NaN();
    for (const auto& values : {random_floats(n, 6u), with_nan}) {
      check_matches_widened_fp32(case_name("has_inf_or_nan", half), {{"x", half, {n}, values}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   return backend.has_inf_or_nan(t[0]) ? 1.0 : 0.0;
                                 });
    }
    auto backend = zt::make_cpu_backend();
    BOOST_TEST(backend->has_inf_or_nan(stored_tensor(*backend, half, {n}, with_nan).tensor));
    BOOST_TEST(!backend->has_inf_or_nan(stored_tensor(*backend, half, {n}, random_floats(n, 6u)).tensor));
  }
}

BOOST_AUTO_TEST_CASE(gemm_and_bias_ops_match_fp32_on_widened_inputs) {
  const int64_t m = 70, k = 300, n = 130;
  for (DType half : kHalfTypes) {
    for (bool transpose_a : {false, true}) {
      for (bool transpose_b : {false, true}) {
        const std::vector<int64_t> a_shape =
            transpose_a ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
        const std::vector<int64_t> b_shape =
            transpose_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
        // c in the inputs' dtype or fp32; beta 0 (c only written) or 1 (c read, then written).
        for (bool c_fp32 : {false, true}) {
          for (float beta : {0.0f, 1.0f}) {
            const DType c_dtype = or_fp32(half, c_fp32);
            check_matches_widened_fp32(
                case_name("matmul", half,
                          std::string("c ") + zt::dtype_name(c_dtype) + ", beta " + std::to_string(beta) +
                              (transpose_a ? ", a^T" : "") + (transpose_b ? ", b^T" : "")),
                {{"c", c_dtype, {m, n}, random_floats(static_cast<size_t>(m * n), 10u)},
                 {"a", half, a_shape, random_floats(static_cast<size_t>(m * k), 11u)},
                 {"b", half, b_shape, random_floats(static_cast<size_t>(k * n), 12u)}},
                [=](Backend& backend, const std::vector<Tensor>& t) {
                  backend.matmul(t[0], t[1], transpose_a, t[2], transpose_b, 0.7f, beta);
                  return 0.0;
                });
          }
        }
      }
    }
    // matmul_bias: c as a or fp32, bias any float.
    for (int mix = 0; mix < 3; ++mix) {
      const DType c_dtype = or_fp32(half, mix == 1), bias_dtype = or_fp32(half, mix == 2);
      check_matches_widened_fp32(
          case_name("matmul_bias", half,
                    std::string("c ") + zt::dtype_name(c_dtype) + ", bias " + zt::dtype_name(bias_dtype)),
          {{"c", c_dtype, {m, n}, random_floats(static_cast<size_t>(m * n), 13u)},
           {"a", half, {m, k}, random_floats(static_cast<size_t>(m * k), 14u)},
           {"b", half, {n, k}, random_floats(static_cast<size_t>(k * n), 15u)},
           {"bias", bias_dtype, {n}, random_floats(static_cast<size_t>(n), 16u)}},
          [](Backend& backend, const std::vector<Tensor>& t) {
            backend.matmul_bias(t[0], t[1], t[2], t[3]);
            return 0.0;
          });
    }
    check_matches_widened_fp32(case_name("matmul_bias", half, "no bias"),
                               {{"c", half, {m, n}, random_floats(static_cast<size_t>(m * n), 17u)},
                                {"a", half, {m, k}, random_floats(static_cast<size_t>(m * k), 18u)},
                                {"b", half, {n, k}, random_floats(static_cast<size_t>(k * n), 19u)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.matmul_bias(t[0], t[1], t[2], Tensor());
                                 return 0.0;
                               });
    // add_bias (y read and written) and bias_backward (dbias +=), each argument any float.
    for (int mix = 0; mix < 3; ++mix) {
      const DType big = or_fp32(half, mix == 1), small = or_fp32(half, mix == 2);
      const std::string detail =
          std::string("rows ") + zt::dtype_name(big) + ", bias " + zt::dtype_name(small);
      check_matches_widened_fp32(case_name("add_bias", half, detail),
                                 {{"y", big, {300, 130}, random_floats(39000, 20u)},
                                  {"bias", small, {130}, random_floats(130, 21u)}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   backend.add_bias(t[0], t[1]);
                                   return 0.0;
                                 });
      check_matches_widened_fp32(case_name("bias_backward", half, detail),
                                 {{"dbias", small, {130}, random_floats(130, 22u)},
                                  {"dy", big, {300, 130}, random_floats(39000, 23u)}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   backend.bias_backward(t[0], t[1]);
                                   return 0.0;
                                 });
    }
  }
}

BOOST_AUTO_TEST_CASE(embedding_ops_match_fp32_on_widened_inputs) {
  const int64_t vocab = 50, cols = 96, rows = 400;
  std::vector<int32_t> ids =
      random_ids(static_cast<size_t>(rows), 30u, static_cast<int32_t>(vocab));  // repeats
  const Tensor id_view(ids.data(), DType::I32, {rows});
  for (DType half : kHalfTypes) {
    check_matches_widened_fp32(
        case_name("embedding_forward", half),
        {{"out", half, {rows, cols}, random_floats(static_cast<size_t>(rows * cols), 31u)},
         {"table", half, {vocab, cols}, random_floats(static_cast<size_t>(vocab * cols), 32u)}},
        [&](Backend& backend, const std::vector<Tensor>& t) {
          backend.embedding_forward(t[0], t[1], id_view);
          return 0.0;
        });
    // Backward: dtable += scatter of dout; dtable fp32 (the weight gradient) or 16-bit, with
    // repeated ids summed in fp32 and rounded once.
    for (bool table_fp32 : {true, false}) {
      const DType table_dtype = or_fp32(half, table_fp32);
      check_matches_widened_fp32(
          case_name("embedding_backward", half, std::string("dtable ") + zt::dtype_name(table_dtype)),
          {{"dtable", table_dtype, {vocab, cols}, random_floats(static_cast<size_t>(vocab * cols), 33u)},
           {"dout", half, {rows, cols}, random_floats(static_cast<size_t>(rows * cols), 34u)}},
          [&](Backend& backend, const std::vector<Tensor>& t) {
            backend.embedding_backward(t[0], t[1], id_view);
            return 0.0;
          });
    }
  }
}

BOOST_AUTO_TEST_CASE(norm_ops_match_fp32_on_widened_inputs) {
  const int64_t rows = 300, cols = 160;
  const auto size = static_cast<size_t>(rows * cols);
  for (DType half : kHalfTypes) {
    for (bool params_fp32 : {false, true}) {  // weight/bias and their gradients: 16-bit or fp32
      const DType param_dtype = or_fp32(half, params_fp32);
      const std::string detail = std::string("params ") + zt::dtype_name(param_dtype);
      check_matches_widened_fp32(case_name("rmsnorm_forward", half, detail),
                                 {{"y", half, {rows, cols}, random_floats(size, 40u)},
                                  {"rstd", DType::F32, {rows}, random_floats(rows, 41u)},
                                  {"x", half, {rows, cols}, random_floats(size, 42u, -3.0f, 3.0f)},
                                  {"weight", param_dtype, {cols}, random_floats(cols, 43u)}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   backend.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f);
                                   return 0.0;
                                 });
      check_matches_widened_fp32(case_name("rmsnorm_backward", half, detail),
                                 {{"dx", half, {rows, cols}, random_floats(size, 44u)},
                                  {"dweight", param_dtype, {cols}, random_floats(cols, 45u)},
                                  {"dy", half, {rows, cols}, random_floats(size, 46u)},
                                  {"x", half, {rows, cols}, random_floats(size, 47u)},
                                  {"weight", param_dtype, {cols}, random_floats(cols, 48u)},
                                  {"rstd", DType::F32, {rows}, random_floats(rows, 49u, 0.5f, 2.0f)}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   backend.rmsnorm_backward(t[0], GradStore::Add, t[1], t[2], t[3], t[4], t[5]);
                                   return 0.0;
                                 });
      check_matches_widened_fp32(case_name("layernorm_forward", half, detail),
                                 {{"y", half, {rows, cols}, random_floats(size, 50u)},
                                  {"mean", DType::F32, {rows}, random_floats(rows, 51u)},
                                  {"rstd", DType::F32, {rows}, random_floats(rows, 52u)},
                                  {"x", half, {rows, cols}, random_floats(size, 53u, -2.0f, 4.0f)},
                                  {"weight", param_dtype, {cols}, random_floats(cols, 54u)},
                                  {"bias", param_dtype, {cols}, random_floats(cols, 55u)}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   backend.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
                                   return 0.0;
                                 });
      check_matches_widened_fp32(case_name("layernorm_backward", half, detail),
                                 {{"dx", half, {rows, cols}, random_floats(size, 56u)},
                                  {"dweight", param_dtype, {cols}, random_floats(cols, 57u)},
                                  {"dbias", param_dtype, {cols}, random_floats(cols, 58u)},
                                  {"dy", half, {rows, cols}, random_floats(size, 59u)},
                                  {"x", half, {rows, cols}, random_floats(size, 60u)},
                                  {"weight", param_dtype, {cols}, random_floats(cols, 61u)},
                                  {"mean", DType::F32, {rows}, random_floats(rows, 62u, -0.1f, 0.1f)},
                                  {"rstd", DType::F32, {rows}, random_floats(rows, 63u, 0.5f, 2.0f)}},
                                 [](Backend& backend, const std::vector<Tensor>& t) {
                                   backend.layernorm_backward(t[0], GradStore::Write, t[1], t[2], t[3], t[4], t[5],
                                                              t[6], t[7]);
                                   return 0.0;
                                 });
    }
    // Frozen parameters (empty gradients) with dx aliasing dy.
    check_matches_widened_fp32(case_name("layernorm_backward", half, "frozen, dx aliases dy"),
                               {{"dy", half, {rows, cols}, random_floats(size, 64u)},
                                {"x", half, {rows, cols}, random_floats(size, 65u)},
                                {"weight", half, {cols}, random_floats(cols, 66u)},
                                {"mean", DType::F32, {rows}, random_floats(rows, 67u)},
                                {"rstd", DType::F32, {rows}, random_floats(rows, 68u, 0.5f, 2.0f)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.layernorm_backward(t[0], GradStore::Write, Tensor(), Tensor(), t[0], t[1],
                                                            t[2], t[3], t[4]);
                                 return 0.0;
                               });
  }
}

BOOST_AUTO_TEST_CASE(pointwise_ops_match_fp32_on_widened_inputs) {
  const int64_t batch = 2, time = 40, heads = 6, head_dim = 64;
  const auto x_size = static_cast<size_t>(batch * time * heads * head_dim);
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));  // inv_freq[D/2]
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / head_dim));
  const Tensor freq_view(inv_freq.data(), DType::F32, {head_dim / 2});
  const int64_t rows = 250, cols = 200;
  const auto size = static_cast<size_t>(rows * cols);
  std::vector<int64_t> row_ids(static_cast<size_t>(rows));  // row_ids[N]: global positions
  for (size_t i = 0; i < row_ids.size(); ++i) row_ids[i] = static_cast<int64_t>(1000 + 3 * i);
  const Tensor row_id_view(row_ids.data(), DType::I64, {rows});
  const zt::RngKey key{7, 3, 11};
  for (DType half : kHalfTypes) {
    // RoPE in place: x read, rotated, rounded once.
    for (bool forward : {true, false}) {
      check_matches_widened_fp32(
          case_name(forward ? "rope_forward" : "rope_backward", half),
          {{"x", half, {batch, time, heads, head_dim}, random_floats(x_size, 70u, -4.0f, 4.0f)}},
          [&](Backend& backend, const std::vector<Tensor>& t) {
            if (forward) {
              backend.rope_forward(t[0], freq_view, Tensor());
            } else {
              backend.rope_backward(t[0], freq_view, Tensor());
            }
            return 0.0;
          });
    }
    check_matches_widened_fp32(case_name("swiglu_forward", half),
                               {{"h", half, {rows, cols}, random_floats(size, 71u)},
                                {"gate", half, {rows, cols}, random_floats(size, 72u, -6.0f, 6.0f)},
                                {"up", half, {rows, cols}, random_floats(size, 73u, -3.0f, 3.0f)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.swiglu_forward(t[0], t[1], t[2]);
                                 return 0.0;
                               });
    check_matches_widened_fp32(case_name("swiglu_backward", half),
                               {{"dgate", half, {rows, cols}, random_floats(size, 74u)},
                                {"dup", half, {rows, cols}, random_floats(size, 75u)},
                                {"dh", half, {rows, cols}, random_floats(size, 76u)},
                                {"gate", half, {rows, cols}, random_floats(size, 77u, -6.0f, 6.0f)},
                                {"up", half, {rows, cols}, random_floats(size, 78u, -3.0f, 3.0f)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.swiglu_backward(t[0], t[1], t[2], t[3], t[4]);
                                 return 0.0;
                               });
    // ReLU in place (y aliases x), and its backward with dx aliasing dy.
    check_matches_widened_fp32(case_name("relu_forward", half, "in place"),
                               {{"x", half, {rows, cols}, random_floats(size, 79u)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.relu_forward(t[0], t[0]);
                                 return 0.0;
                               });
    check_matches_widened_fp32(case_name("relu_backward", half, "dx aliases dy"),
                               {{"dy", half, {rows, cols}, random_floats(size, 80u)},
                                {"y", half, {rows, cols}, random_floats(size, 81u)}},
                               [](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.relu_backward(t[0], t[0], t[1]);
                                 return 0.0;
                               });
    // Dropout in place (p > 0: scaled by 1/(1-p), then rounded), and out of place with p = 0.
    check_matches_widened_fp32(case_name("dropout", half, "in place, p 0.3"),
                               {{"x", half, {rows, cols}, random_floats(size, 82u)}},
                               [&](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.dropout(t[0], t[0], 0.3f, key, row_id_view);
                                 return 0.0;
                               });
    check_matches_widened_fp32(case_name("dropout", half, "p 0"),
                               {{"out", half, {rows, cols}, random_floats(size, 83u)},
                                {"in", half, {rows, cols}, random_floats(size, 84u)}},
                               [&](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.dropout(t[0], t[1], 0.0f, key, row_id_view);
                                 return 0.0;
                               });
  }
}

BOOST_AUTO_TEST_CASE(attention_matches_fp32_on_widened_inputs) {
  const int64_t batch = 2, time = 70, heads = 4, kv_heads = 2, head_dim = 16;  // two query blocks
  const auto q_size = static_cast<size_t>(batch * time * heads * head_dim);
  const auto kv_size = static_cast<size_t>(batch * time * kv_heads * head_dim);
  const auto lse_size = static_cast<size_t>(batch * heads * time);
  const std::vector<int64_t> q_shape = {batch, time, heads, head_dim},
                             kv_shape = {batch, time, kv_heads, head_dim};
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (DType half : kHalfTypes) {
    const std::vector<float> q = random_floats(q_size, 90u, -2.0f, 2.0f);
    const std::vector<float> k = random_floats(kv_size, 91u, -2.0f, 2.0f);
    const std::vector<float> v = random_floats(kv_size, 92u);
    check_matches_widened_fp32(case_name("attention_forward", half),
                               {{"out", half, q_shape, random_floats(q_size, 93u)},
                                {"lse", DType::F32, {batch, heads, time}, random_floats(lse_size, 94u)},
                                {"q", half, q_shape, q},
                                {"k", half, kv_shape, k},
                                {"v", half, kv_shape, v}},
                               [scale](Backend& backend, const std::vector<Tensor>& t) {
                                 backend.attention_forward(t[0], t[1], t[2], t[3], t[4], Tensor(), scale);
                                 return 0.0;
                               });
    // The backward's out and lse from a forward on the stored inputs (consistent probabilities).
    auto backend = zt::make_cpu_backend();
    HostTensor out = make_tensor(*backend, half, q_shape);
    HostTensor lse = make_tensor(*backend, DType::F32, {batch, heads, time});
    backend->attention_forward(out.tensor, lse.tensor, stored_tensor(*backend, half, q_shape, q).tensor,
                               stored_tensor(*backend, half, kv_shape, k).tensor,
                               stored_tensor(*backend, half, kv_shape, v).tensor, Tensor(), scale);
    check_matches_widened_fp32(case_name("attention_backward", half),
                               {{"dq", half, q_shape, random_floats(q_size, 95u)},
                                {"dk", half, kv_shape, random_floats(kv_size, 96u)},
                                {"dv", half, kv_shape, random_floats(kv_size, 97u)},
                                {"dout", half, q_shape, random_floats(q_size, 98u)},
                                {"q", half, q_shape, q},
                                {"k", half, kv_shape, k},
                                {"v", half, kv_shape, v},
                                {"out", half, q_shape, to_floats(*backend, out.tensor)},
                                {"lse", DType::F32, {batch, heads, time}, to_floats(*backend, lse.tensor)}},
                               [scale](Backend& backend_, const std::vector<Tensor>& t) {
                                 backend_.attention_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                                             t[8], Tensor(), scale);
                                 return 0.0;
                               });
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_matches_fp32_on_widened_logits) {
  const int64_t rows = 7, vocab = 1000;
  std::vector<int32_t> targets = random_ids(static_cast<size_t>(rows), 100u, static_cast<int32_t>(vocab));
  std::vector<uint8_t> mask = {1, 1, 0, 1, 1, 0, 1};
  const Tensor target_view(targets.data(), DType::I32, {rows});
  const Tensor mask_view(mask.data(), DType::U8, {rows});
  for (DType half : kHalfTypes) {
    // grad_scale != 0: loss from the widened logits, dlogits written over them and rounded once;
    // grad_scale == 0: the loss only, logits untouched.
    for (float grad_scale : {0.2f, 0.0f}) {
      check_matches_widened_fp32(case_name("cross_entropy", half, "grad_scale " + std::to_string(grad_scale)),
                                 {{"logits",
                                   half,
                                   {rows, vocab},
                                   random_floats(static_cast<size_t>(rows * vocab), 101u, -8.0f, 8.0f)}},
                                 [&](Backend& backend, const std::vector<Tensor>& t) {
                                   return backend.cross_entropy(t[0], target_view, mask_view, grad_scale);
                                 });
    }
  }
}

BOOST_AUTO_TEST_CASE(refused_dtype_combinations_name_the_op_and_argument) {
  using zt::test::check_error_mentions;
  auto backend = zt::make_cpu_backend();
  Backend& b = *backend;
  const auto make = [&](DType dtype, const std::vector<int64_t>& shape) {
    return std::make_shared<HostTensor>(make_tensor(b, dtype, shape));
  };
  // Keeps every tensor alive for the whole case; t(...) returns its view.
  std::vector<std::shared_ptr<HostTensor>> keep;
  const auto t = [&](DType dtype, const std::vector<int64_t>& shape) {
    keep.push_back(make(dtype, shape));
    b.fill(keep.back()->tensor, 1.0f);
    return keep.back()->tensor;
  };
  const DType bf16 = DType::BF16, fp16 = DType::F16, fp32 = DType::F32;
  // GEMMs: a and b one dtype; c that dtype or fp32.
  check_error_mentions(
      [&] {
        b.matmul(t(bf16, {4, 4}), t(bf16, {4, 3}), false, t(fp32, {3, 4}), false, 1.0f, 0.0f);
      },
      {"matmul: b "});
  check_error_mentions(
      [&] {
        b.matmul(t(fp16, {4, 4}), t(bf16, {4, 3}), false, t(bf16, {3, 4}), false, 1.0f, 0.0f);
      },
      {"matmul: c "});
  check_error_mentions(
      [&] {
        b.matmul(t(bf16, {4, 4}), t(fp32, {4, 3}), false, t(fp32, {3, 4}), false, 1.0f, 0.0f);
      },
      {"matmul: c "});
  check_error_mentions(
      [&] {
        b.matmul(t(DType::I32, {4, 4}), t(DType::I32, {4, 3}), false, t(DType::I32, {3, 4}), false, 1.0f,
                 0.0f);
      },
      {"matmul: a ", "fp32, bf16 or fp16"});
  check_error_mentions(
      [&] {
        b.matmul_bias(t(bf16, {4, 4}), t(bf16, {4, 3}), t(fp16, {4, 3}), t(fp32, {4}));
      },
      {"matmul_bias: b "});
  check_error_mentions(
      [&] {
        b.matmul_bias(t(bf16, {4, 4}), t(bf16, {4, 3}), t(bf16, {4, 3}), t(DType::I32, {4}));
      },
      {"matmul_bias: bias "});
  // Elementwise: any float, nothing else.
  check_error_mentions([&] { b.accumulate(t(bf16, {8}), t(DType::I32, {8}), 1.0f); }, {"accumulate: src "});
  check_error_mentions([&] { b.scale(t(DType::U8, {8}), 2.0f); }, {"scale: dst "});
  // Embedding forward: out and table one dtype.
  std::vector<int32_t> ids = {0, 1, 2};
  const Tensor id_view(ids.data(), DType::I32, {3});
  check_error_mentions(
      [&] {
        b.embedding_forward(t(bf16, {3, 4}), t(fp32, {5, 4}), id_view);
      },
      {"embedding_forward: table "});
  // Norms: x, y/dy, dx one dtype; mean/rstd fp32.
  check_error_mentions(
      [&] {
        b.rmsnorm_forward(t(fp32, {3, 4}), t(fp32, {3}), t(bf16, {3, 4}), t(bf16, {4}), 1e-5f);
      },
      {"rmsnorm_forward: y "});
  check_error_mentions(
      [&] {
        b.rmsnorm_forward(t(bf16, {3, 4}), t(bf16, {3}), t(bf16, {3, 4}), t(bf16, {4}), 1e-5f);
      },
      {"rmsnorm_forward: rstd ", "fp32"});
  check_error_mentions(
      [&] {
        b.rmsnorm_backward(t(fp16, {3, 4}), GradStore::Write, t(fp32, {4}), t(bf16, {3, 4}), t(bf16, {3, 4}),
                           t(bf16, {4}), t(fp32, {3}));
      },
      {"rmsnorm_backward: dx "});
  check_error_mentions(
      [&] {
        b.layernorm_forward(t(bf16, {3, 4}), t(bf16, {3}), t(fp32, {3}), t(bf16, {3, 4}), t(bf16, {4}),
                            t(bf16, {4}), 1e-5f);
      },
      {"layernorm_forward: mean ", "fp32"});
  check_error_mentions(
      [&] {
        b.layernorm_backward(t(bf16, {3, 4}), GradStore::Write, t(fp32, {4}), t(fp32, {4}), t(bf16, {3, 4}),
                             t(bf16, {3, 4}), t(bf16, {4}), t(fp32, {3}), t(fp16, {3}));
      },
      {"layernorm_backward: rstd ", "fp32"});
  // RoPE: inv_freq fp32. Pointwise layers: one activation dtype.
  check_error_mentions(
      [&] {
        b.rope_forward(t(bf16, {1, 2, 1, 4}), t(bf16, {2}), Tensor());
      },
      {"rope_forward: inv_freq ", "fp32"});
  check_error_mentions([&] { b.swiglu_forward(t(bf16, {8}), t(bf16, {8}), t(fp32, {8})); },
                       {"swiglu_forward: up "});
  check_error_mentions(
      [&] { b.swiglu_backward(t(bf16, {8}), t(fp16, {8}), t(bf16, {8}), t(bf16, {8}), t(bf16, {8})); },
      {"swiglu_backward: dup "});
  check_error_mentions([&] { b.relu_forward(t(bf16, {8}), t(fp32, {8})); }, {"relu_forward: x "});
  check_error_mentions([&] { b.relu_backward(t(bf16, {8}), t(bf16, {8}), t(fp16, {8})); },
                       {"relu_backward: y "});
  std::vector<int64_t> row_ids = {0, 1};
  const Tensor row_id_view(row_ids.data(), DType::I64, {2});
  check_error_mentions(
      [&] {
        b.dropout(t(fp16, {2, 4}), t(bf16, {2, 4}), 0.1f, zt::RngKey{}, row_id_view);
      },
      {"dropout: in "});
  // Attention: q, k, v, out, dout, dq, dk, dv one dtype; lse fp32.
  const std::vector<int64_t> q_shape = {1, 3, 2, 4}, kv_shape = {1, 3, 1, 4}, lse_shape = {1, 2, 3};
  check_error_mentions(
      [&] {
        b.attention_forward(t(bf16, q_shape), t(fp32, lse_shape), t(bf16, q_shape), t(fp32, kv_shape),
                            t(bf16, kv_shape), Tensor(), 0.5f);
      },
      {"attention_forward: k "});
  check_error_mentions(
      [&] {
        b.attention_forward(t(bf16, q_shape), t(bf16, lse_shape), t(bf16, q_shape), t(bf16, kv_shape),
                            t(bf16, kv_shape), Tensor(), 0.5f);
      },
      {"attention_forward: lse ", "fp32"});
  check_error_mentions(
      [&] {
        b.attention_backward(t(bf16, q_shape), t(bf16, kv_shape), t(fp32, kv_shape), t(bf16, q_shape),
                             t(bf16, q_shape), t(bf16, kv_shape), t(bf16, kv_shape), t(bf16, q_shape),
                             t(fp32, lse_shape), Tensor(), 0.5f);
      },
      {"attention_backward: dv "});
  // Cross-entropy: logits any float, nothing else.
  std::vector<int32_t> targets = {0, 1};
  std::vector<uint8_t> mask = {1, 1};
  check_error_mentions(
      [&] {
        b.cross_entropy(t(DType::I32, {2, 4}), Tensor(targets.data(), DType::I32, {2}),
                        Tensor(mask.data(), DType::U8, {2}), 1.0f);
      },
      {"cross_entropy: logits "});
  // AdamW: all four buffers fp32.
  check_error_mentions(
      [&] { b.optimizer_kernels().adamw(t(fp32, {8}), t(bf16, {8}), t(fp32, {8}), t(fp32, {8}), zt::AdamWParams{}); },
      {"adamw: grad ", "fp32"});
  check_error_mentions(
      [&] { b.optimizer_kernels().adamw(t(bf16, {8}), t(fp32, {8}), t(fp32, {8}), t(fp32, {8}), zt::AdamWParams{}); },
      {"adamw: param ", "fp32"});
}

BOOST_AUTO_TEST_CASE(refused_calls_leave_outputs_untouched) {
  // A refused 16-bit output keeps its contents (errors are raised before anything is written back).
  auto backend = zt::make_cpu_backend();
  HostTensor c = stored_tensor(*backend, DType::BF16, {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  HostTensor a = stored_tensor(*backend, DType::BF16, {2, 3}, random_floats(6, 110u));
  HostTensor wrong =
      stored_tensor(*backend, DType::BF16, {2, 3}, random_floats(6, 111u));  // should be [3, 2]
  BOOST_CHECK_THROW(backend->matmul(c.tensor, a.tensor, false, wrong.tensor, false, 1.0f, 1.0f), zt::Error);
  BOOST_TEST(to_floats(*backend, c.tensor) == (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
}

BOOST_AUTO_TEST_CASE(fp16_overflow_in_an_output_becomes_inf) {
  auto backend = zt::make_cpu_backend();
  const float inf = std::numeric_limits<float>::infinity();
  // accumulate: 60000 + 60000 is finite in fp32, beyond fp16's 65504.
  HostTensor dst = stored_tensor(*backend, DType::F16, {3}, {60000.0f, -60000.0f, 1.0f});
  HostTensor src = stored_tensor(*backend, DType::F16, {3}, {60000.0f, -60000.0f, 1.0f});
  backend->accumulate(dst.tensor, src.tensor, 1.0f);
  BOOST_TEST(to_floats(*backend, dst.tensor) == (std::vector<float>{inf, -inf, 2.0f}));
  BOOST_TEST(backend->has_inf_or_nan(dst.tensor));
  // matmul: a row of 300 * 300 products of 256 * 1 sums to 76800 > 65504.
  HostTensor a = stored_tensor(*backend, DType::F16, {1, 300}, std::vector<float>(300, 256.0f));
  HostTensor b = stored_tensor(*backend, DType::F16, {300, 2}, std::vector<float>(600, 1.0f));
  HostTensor c = make_tensor(*backend, DType::F16, {1, 2});
  backend->matmul(c.tensor, a.tensor, false, b.tensor, false, 1.0f, 0.0f);
  BOOST_TEST(to_floats(*backend, c.tensor) == (std::vector<float>{inf, inf}));
  // The same product into an fp32 c stays finite (fp32 weight gradients from fp16 inputs).
  HostTensor c32 = make_tensor(*backend, DType::F32, {1, 2});
  backend->matmul(c32.tensor, a.tensor, false, b.tensor, false, 1.0f, 0.0f);
  BOOST_TEST(to_floats(*backend, c32.tensor) == (std::vector<float>{76800.0f, 76800.0f}));
  // scale: 40000 * 2.
  HostTensor x = stored_tensor(*backend, DType::F16, {2}, {40000.0f, 3.0f});
  backend->scale(x.tensor, 2.0f);
  BOOST_TEST(to_floats(*backend, x.tensor) == (std::vector<float>{inf, 6.0f}));
  // bf16's range is fp32's: the same accumulate stays finite.
  HostTensor wide_dst = stored_tensor(*backend, DType::BF16, {1}, {60000.0f});
  backend->accumulate(wide_dst.tensor, wide_dst.tensor, 1.0f);
  BOOST_TEST(to_floats(*backend, wide_dst.tensor)[0] ==
             zt::round_to(DType::BF16, 2.0f * zt::round_to(DType::BF16, 60000.0f)));
}

BOOST_AUTO_TEST_CASE(matmul_bias_agrees_with_matmul_plus_add_bias) {
  // fp32: matmul_bias writes the bias into C and runs one GEMM with beta = 1, so the bias enters
  // OpenBLAS's accumulation (C += sum of each K block) instead of being added after it: the two
  // differ only by fp32 reassociation, bounded here by 1e-6 relative to sum_k |a b| + |bias|.
  auto backend = zt::make_cpu_backend();
  const int64_t m = 33, k = 700, n = 45;  // K over several OpenBLAS K blocks
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 120u);
  const std::vector<float> b = random_floats(static_cast<size_t>(n * k), 121u);
  const std::vector<float> bias = random_floats(static_cast<size_t>(n), 122u, -20.0f, 20.0f);
  std::vector<double> magnitude(static_cast<size_t>(m * n));  // sum_k |a b| + |bias| per element
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = std::fabs(bias[static_cast<size_t>(j)]);
      for (int64_t p = 0; p < k; ++p)
        sum += std::fabs(static_cast<double>(a[static_cast<size_t>(i * k + p)]) *
                         b[static_cast<size_t>(j * k + p)]);
      magnitude[static_cast<size_t>(i * n + j)] = sum;
    }
  }
  for (DType dtype : {DType::F32, DType::BF16}) {
    HostTensor a_t = stored_tensor(*backend, dtype, {m, k}, a);
    HostTensor b_t = stored_tensor(*backend, dtype, {n, k}, b);
    HostTensor bias_t = stored_tensor(*backend, dtype, {n}, bias);
    HostTensor fused = make_tensor(*backend, dtype, {m, n});
    HostTensor separate = make_tensor(*backend, dtype, {m, n});
    HostTensor product = make_tensor(*backend, DType::F32, {m, n});  // A B^T in fp32, no bias
    backend->matmul_bias(fused.tensor, a_t.tensor, b_t.tensor, bias_t.tensor);
    backend->matmul(separate.tensor, a_t.tensor, false, b_t.tensor, true, 1.0f, 0.0f);
    backend->add_bias(separate.tensor, bias_t.tensor);
    backend->matmul(product.tensor, a_t.tensor, false, b_t.tensor, true, 1.0f, 0.0f);
    const std::vector<float> got = to_floats(*backend, fused.tensor);
    const std::vector<float> expected = to_floats(*backend, separate.tensor);
    const std::vector<float> products = to_floats(*backend, product.tensor);
    // bf16: matmul + add_bias rounds twice (A B^T to bf16, then the sum); matmul_bias once. With
    // u(x) the bf16 spacing at |x|, |fused - separate| <= u(result) (each result within half a
    // spacing of nearly the same fp32 sum) + u(A B^T) / 2 (the first rounding of the two-step
    // path), plus the fp32 bound above. Only that first rounding can make them differ by more than
    // one bf16 ulp (when the bias cancels most of A B^T).
    const auto bf16_spacing = [](double x) {
      const double magnitude_x =
          std::max(std::fabs(x), static_cast<double>(std::numeric_limits<float>::min()));
      return std::ldexp(1.0, std::ilogb(magnitude_x) - 7);  // 8 significant bits
    };
    int64_t differing = 0, beyond_one_ulp = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double difference = std::fabs(static_cast<double>(got[i]) - expected[i]);
      double bound = 1e-6 * magnitude[i];
      if (dtype == DType::BF16) {
        const double result_spacing = bf16_spacing(std::max(std::fabs(got[i]), std::fabs(expected[i])));
        bound += result_spacing + 0.5 * bf16_spacing(products[i]);
        if (difference > 0.0) ++differing;
        if (difference > result_spacing) ++beyond_one_ulp;
      }
      BOOST_TEST(difference <= bound, zt::dtype_name(dtype)
                                          << " matmul_bias [" << i << "] = " << got[i]
                                          << ", matmul + add_bias = " << expected[i] << ", bound " << bound);
    }
    BOOST_TEST_MESSAGE(zt::dtype_name(dtype)
                       << ": " << differing << " of " << got.size() << " elements differ, " << beyond_one_ulp
                       << " by more than one bf16 ulp");
  }
}

BOOST_AUTO_TEST_CASE(host_allocator_routes_allocations) {
  struct Counts {
    int allocations = 0;
    int releases = 0;
    size_t bytes = 0;
  };
  auto counts = std::make_shared<Counts>();
  zt::HostAllocator counting;
  counting.allocate = [counts](size_t bytes) {
    ++counts->allocations;
    counts->bytes += bytes;
    return std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  };
  counting.release = [counts](void* pointer) {
    ++counts->releases;
    std::free(pointer);
  };
  auto backend = zt::make_cpu_backend(counting);
  {
    Buffer first(*backend, 1000);
    Buffer second(*backend, 24);
    BOOST_TEST(counts->allocations == 2);
    BOOST_TEST(counts->bytes == 1024u);
    BOOST_TEST(counts->releases == 0);
    BOOST_TEST(reinterpret_cast<uintptr_t>(first.data()) % 64 == 0u);
    // Ops run on its memory as on any other (and their fp32 scratch does not go through it).
    Tensor x = first.view(DType::BF16, {500});
    backend->fill(x, 1.5f);
    backend->scale(x, 2.0f);
    BOOST_TEST(backend->sum_squares(x) == 500.0 * 9.0);
    BOOST_TEST(counts->allocations == 2);
  }
  BOOST_TEST(counts->releases == 2);

  // Both functions or neither.
  zt::HostAllocator allocate_only;
  allocate_only.allocate = counting.allocate;
  zt::test::check_error([&] { zt::make_cpu_backend(allocate_only); }, "make_cpu_backend");
  zt::HostAllocator release_only;
  release_only.release = counting.release;
  zt::test::check_error([&] { zt::make_cpu_backend(release_only); }, "make_cpu_backend");

  // A pointer that is not 64-byte aligned is refused (and handed back to the allocator).
  alignas(64) static unsigned char arena[128];
  auto misaligned_releases = std::make_shared<int>(0);
  zt::HostAllocator misaligned;
  misaligned.allocate = [](size_t) -> void* { return arena + 8; };
  misaligned.release = [misaligned_releases](void* pointer) {
    BOOST_TEST(pointer == static_cast<void*>(arena + 8));
    ++*misaligned_releases;
  };
  auto bad_backend = zt::make_cpu_backend(misaligned);
  zt::test::check_error_mentions([&] { bad_backend->allocate(16); }, {"cpu backend", "64-byte aligned"});
  BOOST_TEST(*misaligned_releases == 1);
}

BOOST_AUTO_TEST_SUITE_END()
