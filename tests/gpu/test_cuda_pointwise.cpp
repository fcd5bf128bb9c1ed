// GPU tests of the CUDA backend's pointwise ops and reductions against the CPU backend (or
// exact host arithmetic where the result is fully determined): accumulate, scale, add_bias,
// bias_backward, SwiGLU, ReLU, RoPE, dropout (the same mask bit for bit), sum_squares,
// has_inf_or_nan, their multi-tensor forms sum_squares_of (bit-identical to the sum of
// sum_squares in span order) and has_inf_or_nan_in, embedding forward/backward (backward
// bit-identical: same summation order),
// bad ids, and the deferred dropout error. Sizes are not multiples of the 8-element vectors.
// Bounds: exact where stated; SwiGLU and RoPE fp32 1e-5 (exp/sin/cos differ by an ulp or two
// between glibc and CUDA); column sums 1e-5; sum_squares 1e-12 (both in double).
#include <boost/test/unit_test.hpp>

#include <span>
#include <vector>

#include "core/rng.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

constexpr int64_t kRows = 37, kCols = 45;  // 1665 elements: a ragged last vector

BOOST_AUTO_TEST_SUITE(cuda_pointwise)

BOOST_AUTO_TEST_CASE(accumulate_and_scale_exactly_for_every_dtype_pair) {
  const float scale_factor = 0.37f;
  for (DType dst_dtype : float_dtypes()) {
    for (DType src_dtype : float_dtypes()) {
      const std::vector<float> dst = rounded(random_floats(kRows * kCols, 1), dst_dtype);
      const std::vector<float> src = rounded(random_floats(kRows * kCols, 2), src_dtype);
      std::vector<float> expected(dst.size());
      for (size_t i = 0; i < dst.size(); ++i) {
        const float product = scale_factor * src[i];  // rounded once, as the kernel does
        expected[i] = round_to(dst_dtype, dst[i] + product);
      }
      DeviceTensor d = upload(dst, dst_dtype, {kRows, kCols});
      DeviceTensor s = upload(src, src_dtype, {kRows, kCols});
      gpu().accumulate(d, s, scale_factor);
      check_identical(download(d), expected,
                      cat("accumulate ", dtype_name(dst_dtype), " += ", dtype_name(src_dtype)));
    }
    const std::vector<float> x = rounded(random_floats(kRows * kCols, 3), dst_dtype);
    std::vector<float> expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) expected[i] = round_to(dst_dtype, x[i] * -1.5f);
    DeviceTensor t = upload(x, dst_dtype, {kRows * kCols});
    gpu().scale(t, -1.5f);
    check_identical(download(t), expected, cat("scale ", dtype_name(dst_dtype)));
  }
}

BOOST_AUTO_TEST_CASE(bias_forward_and_backward) {
  for (DType dtype : float_dtypes()) {
    const std::vector<float> y = rounded(random_floats(kRows * kCols, 4), dtype);
    const std::vector<float> bias = random_floats(kCols, 5);
    std::vector<float> expected(y.size());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        const size_t i = static_cast<size_t>(r * kCols + c);
        expected[i] = round_to(dtype, y[i] + bias[static_cast<size_t>(c)]);
      }
    }
    DeviceTensor y_device = upload(y, dtype, {kRows, kCols});
    DeviceTensor bias_device = upload(bias, DType::F32, {kCols});
    gpu().add_bias(y_device, bias_device);
    check_identical(download(y_device), expected, cat("add_bias ", dtype_name(dtype)));

    // dbias (fp32, not zero: the op accumulates) += column sums of dy; 300 rows: several chunks.
    const int64_t rows = 300;
    std::vector<float> dy = rounded(random_floats(static_cast<size_t>(rows * kCols), 6), dtype);
    std::vector<float> dbias = random_floats(kCols, 7);
    DeviceTensor dy_device = upload(dy, dtype, {rows, kCols});
    DeviceTensor dbias_device = upload(dbias, DType::F32, {kCols});
    cpu().bias_backward(view(dbias, {kCols}), view(dy, {rows, kCols}));
    gpu().bias_backward(dbias_device, dy_device);
    check_near(download(dbias_device), dbias, DType::F32, 1e-5, "bias_backward");
  }
}

BOOST_AUTO_TEST_CASE(swiglu_and_relu) {
  for (DType dtype : float_dtypes()) {
    const int64_t n = kRows * kCols;
    std::vector<float> gate = rounded(random_floats(n, 8, -6.0f, 6.0f), dtype);
    std::vector<float> up = rounded(random_floats(n, 9), dtype);
    std::vector<float> dh = rounded(random_floats(n, 10), dtype);
    std::vector<float> h(n), dgate(n), dup(n);
    cpu().swiglu_forward(view(h, {n}), view(gate, {n}), view(up, {n}));
    cpu().swiglu_backward(view(dgate, {n}), view(dup, {n}), view(dh, {n}), view(gate, {n}), view(up, {n}));
    DeviceTensor gate_d = upload(gate, dtype, {n}), up_d = upload(up, dtype, {n});
    DeviceTensor dh_d = upload(dh, dtype, {n});
    DeviceTensor h_d = poisoned(dtype, {n}), dgate_d = poisoned(dtype, {n}), dup_d = poisoned(dtype, {n});
    gpu().swiglu_forward(h_d, gate_d, up_d);
    gpu().swiglu_backward(dgate_d, dup_d, dh_d, gate_d, up_d);
    check_near(download(h_d), h, dtype, 1e-5, "swiglu h");
    check_near(download(dgate_d), dgate, dtype, 1e-5, "swiglu dgate");
    check_near(download(dup_d), dup, dtype, 1e-5, "swiglu dup");

    // ReLU in place (y aliases x) and its backward in place (dx aliases dy): exact.
    std::vector<float> y(gate), dx(dh);
    cpu().relu_forward(view(y, {n}), view(y, {n}));
    cpu().relu_backward(view(dx, {n}), view(dx, {n}), view(y, {n}));
    DeviceTensor y_d = upload(gate, dtype, {n});
    gpu().relu_forward(y_d, y_d);
    gpu().relu_backward(dh_d, dh_d, y_d);
    check_identical(download(y_d), y, "relu forward");
    check_identical(download(dh_d), dx, "relu backward");
  }
}

BOOST_AUTO_TEST_CASE(rope_forward_and_backward) {
  const int64_t batch = 2, time = 50, heads = 3, head_dim = 16, n = batch * time * heads * head_dim;
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / head_dim));
  }
  DeviceTensor freq_d = upload(inv_freq, DType::F32, {head_dim / 2});
  for (DType dtype : float_dtypes()) {
    const std::vector<float> x = rounded(random_floats(n, 11), dtype);
    std::vector<float> forward = x, backward = x;
    cpu().rope_forward(view(forward, {batch, time, heads, head_dim}), view(inv_freq, {head_dim / 2}), Tensor());
    cpu().rope_backward(view(backward, {batch, time, heads, head_dim}), view(inv_freq, {head_dim / 2}), Tensor());
    DeviceTensor f = upload(x, dtype, {batch, time, heads, head_dim});
    DeviceTensor b = upload(x, dtype, {batch, time, heads, head_dim});
    gpu().rope_forward(f, freq_d, Tensor());
    gpu().rope_backward(b, freq_d, Tensor());
    check_near(download(f), forward, dtype, 1e-5, "rope forward");
    check_near(download(b), backward, dtype, 1e-5, "rope backward");
  }
  // Packed rows (--packing): positions restart at each sample (row 0: samples of 20 and 30
  // tokens; row 1: 50).
  std::vector<int32_t> positions;
  for (int t = 0; t < 20; ++t) positions.push_back(t);
  for (int t = 0; t < 30; ++t) positions.push_back(t);
  for (int t = 0; t < 50; ++t) positions.push_back(t);
  DeviceTensor positions_d = upload_integers(positions, {batch * time});
  for (DType dtype : float_dtypes()) {
    const std::vector<float> x = rounded(random_floats(n, 12), dtype);
    std::vector<float> forward = x, backward = x;
    cpu().rope_forward(view(forward, {batch, time, heads, head_dim}), view(inv_freq, {head_dim / 2}),
                       view(positions, {batch * time}));
    cpu().rope_backward(view(backward, {batch, time, heads, head_dim}), view(inv_freq, {head_dim / 2}),
                        view(positions, {batch * time}));
    DeviceTensor f = upload(x, dtype, {batch, time, heads, head_dim});
    DeviceTensor b = upload(x, dtype, {batch, time, heads, head_dim});
    gpu().rope_forward(f, freq_d, positions_d);
    gpu().rope_backward(b, freq_d, positions_d);
    check_near(download(f), forward, dtype, 1e-5, "packed rope forward");
    check_near(download(b), backward, dtype, 1e-5, "packed rope backward");
  }
}

BOOST_AUTO_TEST_CASE(dropout_draws_the_cpu_mask) {
  const float p = 0.3f;
  RngKey key;
  key.seed = 1234;
  key.purpose = rng_stream(RngPurpose::LoraDropout, 5);
  key.step = 9;
  std::vector<int64_t> row_ids(kRows);
  for (int64_t r = 0; r < kRows; ++r) row_ids[static_cast<size_t>(r)] = 1000 + 3 * r;  // global positions
  DeviceTensor row_ids_d = upload_integers(row_ids, {kRows});
  for (DType dtype : float_dtypes()) {
    std::vector<float> in = rounded(random_floats(kRows * kCols, 12, 0.5f, 1.5f), dtype);  // never 0
    std::vector<float> expected(in.size());
    cpu().dropout(view(expected, {kRows, kCols}), view(in, {kRows, kCols}), p, key, view(row_ids, {kRows}));
    DeviceTensor in_d = upload(in, dtype, {kRows, kCols});
    DeviceTensor out_d = poisoned(dtype, {kRows, kCols});
    gpu().dropout(out_d, in_d, p, key, row_ids_d);
    const std::vector<float> actual = download(out_d);
    size_t dropped = 0, mismatched = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      dropped += expected[i] == 0.0f;
      mismatched += (expected[i] == 0.0f) != (actual[i] == 0.0f);
    }
    BOOST_TEST(mismatched == 0u, "dropout mask differs from the CPU's in " << mismatched << " elements");
    BOOST_TEST(dropped > in.size() / 5);  // about 30% dropped
    BOOST_TEST(dropped < in.size() / 2);
    if (dtype == DType::F32) {
      check_identical(actual, expected, "dropout fp32");
    } else {
      check_near(actual, expected, dtype, 0.0, "dropout");
    }
  }
}

BOOST_AUTO_TEST_CASE(negative_row_id_is_reported_at_the_next_synchronisation) {
  std::vector<int64_t> row_ids = {0, 1, -5, 3};
  DeviceTensor ids = upload_integers(row_ids, {4});
  DeviceTensor x = upload(random_floats(4 * 8, 13), DType::F32, {4, 8});
  gpu().dropout(x, x, 0.5f, RngKey{}, ids);
  zt::test::check_error_mentions([&] { gpu().synchronize(); }, {"dropout", "negative"});
  gpu().synchronize();  // reported once, then cleared
}

BOOST_AUTO_TEST_CASE(sum_squares_and_inf_nan_checks) {
  for (DType dtype : float_dtypes()) {
    const int64_t n = 100003;
    std::vector<float> x = rounded(random_floats(n, 14, -2.0f, 2.0f), dtype);
    DeviceTensor x_d = upload(x, dtype, {n});
    const double expected = cpu().sum_squares(view(x, {n}));
    const double first = gpu().sum_squares(x_d);
    BOOST_TEST(first == expected, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(gpu().sum_squares(x_d) == first);  // bitwise reproducible
    BOOST_TEST(!gpu().has_inf_or_nan(x_d));
    for (float bad : {kNaN, kInf, -kInf}) {
      for (int64_t where : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> y = x;
        y[static_cast<size_t>(where)] = bad;
        DeviceTensor y_d = upload(y, dtype, {n});
        BOOST_TEST(gpu().has_inf_or_nan(y_d), dtype_name(dtype) << " " << bad << " at " << where);
      }
    }
  }
  // fp16 overflow: 1e5 is inf once stored as fp16.
  DeviceTensor overflow = upload({1.0f, 1.0e5f, 2.0f}, DType::F16, {3});
  BOOST_TEST(gpu().has_inf_or_nan(overflow));
}

BOOST_AUTO_TEST_CASE(sum_squares_of_and_has_inf_or_nan_in_over_several_tensors) {
  // Three dtypes and sizes: many blocks, a ragged last vector, shorter than one vector.
  std::vector<float> a = rounded(random_floats(100003, 21, -2.0f, 2.0f), DType::F32);
  std::vector<float> b = rounded(random_floats(kRows * kCols, 22, -3.0f, 3.0f), DType::BF16);
  std::vector<float> c = rounded(random_floats(5, 23, -70.0f, 70.0f), DType::F16);
  DeviceTensor a_d = upload(a, DType::F32, {100003});
  DeviceTensor b_d = upload(b, DType::BF16, {kRows, kCols});
  DeviceTensor c_d = upload(c, DType::F16, {5});
  const std::vector<Tensor> xs = {a_d, b_d, c_d};
  // Exactly the single-tensor results added in span order (the documented order).
  const double expected = 0.0 + gpu().sum_squares(a_d) + gpu().sum_squares(b_d) + gpu().sum_squares(c_d);
  const double total = gpu().sum_squares_of(xs);
  BOOST_TEST(total == expected);
  BOOST_TEST(gpu().sum_squares_of(xs) == total);  // bitwise reproducible
  const double cpu_total = cpu().sum_squares(view(a, {100003})) +
                           cpu().sum_squares(view(b, {kRows * kCols})) + cpu().sum_squares(view(c, {5}));
  BOOST_TEST(total == cpu_total, boost::test_tools::tolerance(1e-12));
  // An empty tensor adds nothing; no tensors give 0.
  const Tensor empty(nullptr, DType::BF16, {0}, Device::CUDA);
  const std::vector<Tensor> with_empty = {a_d, empty, c_d};
  BOOST_TEST(gpu().sum_squares_of(with_empty) == 0.0 + gpu().sum_squares(a_d) + gpu().sum_squares(c_d));
  BOOST_TEST(gpu().sum_squares_of(std::span<const Tensor>{}) == 0.0);

  BOOST_TEST(!gpu().has_inf_or_nan_in(xs));
  BOOST_TEST(!gpu().has_inf_or_nan_in(std::span<const Tensor>{}));
  BOOST_TEST(!gpu().has_inf_or_nan_in(with_empty));
  std::vector<float> c_bad = c;
  c_bad.back() = kInf;  // only in the last element of the last tensor
  DeviceTensor c_bad_d = upload(c_bad, DType::F16, {5});
  const std::vector<Tensor> bad_last = {a_d, b_d, c_bad_d};
  BOOST_TEST(gpu().has_inf_or_nan_in(bad_last));
  BOOST_TEST(!gpu().has_inf_or_nan_in(std::span<const Tensor>(bad_last).first(2)));

  // Arguments are named by their index.
  std::vector<float> host(4, 1.0f);
  const std::vector<Tensor> with_host = {a_d, view(host, {4})};
  zt::test::check_error_mentions([&] { gpu().sum_squares_of(with_host); },
                                 {"sum_squares_of", "xs[1]", "device memory"});
  zt::test::check_error_mentions([&] { gpu().has_inf_or_nan_in(with_host); },
                                 {"has_inf_or_nan_in", "xs[1]", "device memory"});
  DeviceTensor ids = upload_integers(std::vector<int32_t>(4, 0), {4});
  const std::vector<Tensor> with_ints = {a_d, b_d, ids};
  zt::test::check_error_mentions([&] { gpu().sum_squares_of(with_ints); },
                                 {"sum_squares_of", "xs[2]", "fp32, bf16 or fp16"});
}

BOOST_AUTO_TEST_CASE(embedding_forward_and_deterministic_backward) {
  const int64_t vocab = 17, rows = 300, cols = 37;
  std::vector<int32_t> ids = random_ids(rows, 15, static_cast<int32_t>(vocab));  // many repeats
  ids[7] = static_cast<int32_t>(vocab - 1);
  DeviceTensor ids_d = upload_integers(ids, {rows});
  for (DType dtype : float_dtypes()) {
    std::vector<float> table = rounded(random_floats(vocab * cols, 16), dtype);
    std::vector<float> out(rows * cols);
    cpu().embedding_forward(view(out, {rows, cols}), view(table, {vocab, cols}), view(ids, {rows}));
    DeviceTensor table_d = upload(table, dtype, {vocab, cols});
    DeviceTensor out_d = poisoned(dtype, {rows, cols});
    gpu().embedding_forward(out_d, table_d, ids_d);
    check_identical(download(out_d), out, cat("embedding_forward ", dtype_name(dtype)));

    // Backward into an fp32 table gradient that already holds values: the same additions in
    // the same order as the CPU backend, so bit-identical.
    std::vector<float> dout = rounded(random_floats(rows * cols, 17), dtype);
    std::vector<float> dtable = random_floats(vocab * cols, 18);
    DeviceTensor dout_d = upload(dout, dtype, {rows, cols});
    DeviceTensor dtable_d = upload(dtable, DType::F32, {vocab, cols});
    cpu().embedding_backward(view(dtable, {vocab, cols}), view(dout, {rows, cols}), view(ids, {rows}));
    gpu().embedding_backward(dtable_d, dout_d, ids_d);
    check_identical(download(dtable_d), dtable, cat("embedding_backward ", dtype_name(dtype)));
  }
}

// A bad id is a deferred error (no synchronisation inside the op): reported, with the id and
// the vocabulary, by the next synchronisation, once.
BOOST_AUTO_TEST_CASE(bad_ids_are_reported_at_the_next_synchronisation) {
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 17, 1, 2};
  DeviceTensor ids_d = upload_integers(ids, {8});
  DeviceTensor table = upload(random_floats(17 * 4, 19), DType::F32, {17, 4});
  DeviceTensor out = device_tensor(DType::F32, {8, 4});
  BOOST_CHECK_NO_THROW(gpu().embedding_forward(out, table, ids_d));
  zt::test::check_error_mentions([&] { gpu().synchronize(); },
                                 {"embedding_forward", "an id (17)", "outside the vocabulary [0, 17)"});
  BOOST_CHECK_NO_THROW(gpu().synchronize());  // reported once, then cleared
  DeviceTensor dtable = device_tensor(DType::F32, {17, 4});
  BOOST_CHECK_NO_THROW(gpu().embedding_backward(dtable, out, ids_d));
  zt::test::check_error_mentions([&] { gpu().synchronize(); }, {"embedding_backward", "an id (17)", "[0, 17)"});
  BOOST_CHECK_NO_THROW(gpu().synchronize());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
