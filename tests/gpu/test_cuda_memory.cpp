// GPU tests of the CUDA backend's memory ops: dtype conversions by copy() and round_to()
// (bit-exact against the host's float_to_bf16/float_to_fp16, across host and device), fill() of every dtype, the
// caching allocator (no cudaMalloc in steady state, bytes in use and peak), and argument
// errors (host memory given to a device op).
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

// Values that exercise rounding: ties, subnormals of fp16, overflow, inf, NaN, signed zero.
std::vector<float> awkward_values() {
  std::vector<float> values = random_floats(1000, 11, -3.0f, 3.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                            6.0e-8f, -3.0e-6f, 65504.0f, 65520.0f, 1.0e6f, 3.0e38f, kInf, -kInf,
                            kNaN, 1.0e-40f};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  return values;
}

BOOST_AUTO_TEST_SUITE(cuda_memory)

BOOST_AUTO_TEST_CASE(copy_converts_like_the_host_in_every_direction) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType first : float_dtypes()) {
    for (DType second : float_dtypes()) {
      // host fp32 -> device `first` -> device `second` -> host fp32
      DeviceTensor a = upload(values, first, {n});
      DeviceTensor b = poisoned(second, {n});
      gpu().copy(b, a);
      const std::vector<float> expected = rounded(rounded(values, first), second);
      check_identical(download(b), expected,
                      cat("copy ", dtype_name(first), " -> ", dtype_name(second)));
    }
  }
}

BOOST_AUTO_TEST_CASE(copy_between_host_half_and_device_float) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint16_t> host_bf16(values.size());
  for (size_t i = 0; i < values.size(); ++i) host_bf16[i] = float_to_bf16(values[i]);
  // host bf16 -> device fp32: exact widening.
  DeviceTensor wide = poisoned(DType::F32, {n});
  gpu().copy(wide, Tensor(host_bf16.data(), DType::BF16, {n}));
  check_identical(download(wide), rounded(values, DType::BF16), "host bf16 -> device fp32");
  // device fp32 -> host fp16: the kernel's rounding against float_to_fp16's, bit for bit.
  DeviceTensor source = upload(values, DType::F32, {n});
  std::vector<uint16_t> host_fp16(values.size(), 0xFFFF);
  gpu().copy(Tensor(host_fp16.data(), DType::F16, {n}), source);
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      BOOST_TEST(std::isnan(fp16_to_float(host_fp16[i])));
    } else {
      BOOST_TEST(host_fp16[i] == float_to_fp16(values[i]), "fp16 bits of " << values[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(round_to_in_place_like_the_host) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType dtype : float_dtypes()) {
    DeviceTensor x = upload(values, DType::F32, {n});
    gpu().round_to(x, dtype);
    check_identical(download(x), rounded(values, dtype), cat("round_to ", dtype_name(dtype)));
  }
}

BOOST_AUTO_TEST_CASE(copy_of_integers_and_sizes_checked) {
  std::vector<int64_t> ids = {5, -1, 1LL << 40, 0};
  DeviceTensor device_ids = upload_integers(ids, {4});
  std::vector<int64_t> back(4, 0);
  gpu().copy(view(back, {4}), device_ids);
  BOOST_TEST(back == ids);
  DeviceTensor small = device_tensor(DType::F32, {3});
  zt::test::check_error([&] { gpu().copy(small, device_ids); }, "same number of elements");
  DeviceTensor four = device_tensor(DType::I32, {4});
  zt::test::check_error([&] { gpu().copy(four, device_ids); }, "cannot convert");
}

BOOST_AUTO_TEST_CASE(fill_writes_every_dtype) {
  const int64_t n = 1001;  // not a multiple of the 8-element vectors
  for (DType dtype : float_dtypes()) {
    DeviceTensor t = device_tensor(dtype, {n});
    gpu().fill(t, 0.1f);
    check_identical(download(t), std::vector<float>(n, round_to(dtype, 0.1f)),
                    cat("fill ", dtype_name(dtype)));
  }
  DeviceTensor ints = device_tensor(DType::I32, {n});
  gpu().fill(ints, -7.0f);
  std::vector<int32_t> int_values(n);
  gpu().copy(view(int_values, {n}), ints);
  BOOST_TEST(int_values == std::vector<int32_t>(n, -7));
  DeviceTensor bytes = device_tensor(DType::U8, {n});
  gpu().fill(bytes, 1.0f);
  std::vector<uint8_t> byte_values(n);
  gpu().copy(view(byte_values, {n}), bytes);
  BOOST_TEST(byte_values == std::vector<uint8_t>(n, 1));
  zt::test::check_error([&] { gpu().fill(ints, 0.5f); }, "not representable");
}

BOOST_AUTO_TEST_CASE(allocator_reuses_blocks_in_steady_state) {
  CudaBackend& backend = gpu();
  backend.synchronize();
  const size_t baseline = backend.memory_in_use();
  // One "step": the same sequence of allocations, released in a different order.
  auto step = [&] {
    std::vector<Buffer> buffers;
    const size_t sizes[] = {1000, 4 << 20, 123457, 64, 3 << 20, 4 << 20};
    for (size_t bytes : sizes) buffers.emplace_back(backend, bytes);
    size_t requested = 0;
    for (size_t bytes : sizes) requested += bytes;
    BOOST_TEST(backend.memory_in_use() >= baseline + requested);
    buffers.erase(buffers.begin() + 1);
    buffers.emplace_back(backend, 4 << 20);
  };
  step();
  const size_t allocations = backend.device_allocations();
  const size_t peak = backend.memory_peak();
  for (int repeat = 0; repeat < 5; ++repeat) step();
  BOOST_TEST(backend.device_allocations() == allocations, "steady-state steps called cudaMalloc");
  BOOST_TEST(backend.memory_in_use() == baseline);
  BOOST_TEST(backend.memory_peak() == peak);
  BOOST_TEST(backend.memory_reserved() >= peak);
  backend.reset_peak();
  BOOST_TEST(backend.memory_peak() == baseline);
  // Ops' scratch buffers come from the cache too: a second identical op allocates nothing.
  DeviceTensor x = upload(random_floats(1 << 16, 3), DType::F32, {1 << 16});
  const double first = backend.sum_squares(x);
  const size_t after_first = backend.device_allocations();
  BOOST_TEST(backend.sum_squares(x) == first);  // deterministic
  BOOST_TEST(backend.device_allocations() == after_first);
}

BOOST_AUTO_TEST_CASE(release_of_a_foreign_pointer_is_an_error) {
  int local = 0;
  zt::test::check_error([&] { gpu().release(&local); }, "not a live block");
}

BOOST_AUTO_TEST_CASE(host_memory_given_to_a_device_op_is_an_error) {
  std::vector<float> host(16, 1.0f);
  zt::test::check_error_mentions([&] { gpu().scale(view(host, {16}), 2.0f); },
                                 {"scale", "dst", "device memory"});
  DeviceTensor x = upload(host, DType::F32, {16});
  DeviceTensor ids = upload_integers(std::vector<int32_t>(16, 0), {16});
  zt::test::check_error_mentions([&] { gpu().accumulate(x, ids, 1.0f); },
                                 {"accumulate", "src", "fp32, bf16 or fp16"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
