// Shared helpers of the GPU tests: the two backends (CPU reference, CUDA under test), device
// tensors made from host vectors in any dtype, NaN-poisoned outputs, downloads to fp32, and
// the comparison bound per dtype.
//
// Bounds: |gpu - cpu| <= rtol * (|cpu| + rms(cpu)) element-wise, where rtol is the fp32 bound
// the test states for its op, raised to two units of roundoff of the storage dtype when that
// is larger (bf16: 2^-7 = 7.8e-3, fp16: 2^-10 = 9.8e-4). Both backends see the same inputs:
// random fp32 values rounded to the dtype; the CPU computes in fp32 on them, the GPU in fp32
// with the dtype's storage, so the difference is the GPU's output rounding plus fp32
// reassociation. The rms term is the floor for elements that cancel to near zero.
#pragma once
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "test_helpers.h"

namespace zt::gpu_test {

using zt::test::random_floats;
using zt::test::random_ids;
using zt::test::view;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The CUDA backend on device 0, made once per process. Without a GPU the calling test FAILS.
// Never destroyed: at exit the CUDA runtime may be torn down before static destructors run.
inline CudaBackend& gpu() {
  static CudaBackend* backend = nullptr;
  if (!backend) {
    BOOST_REQUIRE_MESSAGE(cuda_device_count() > 0,
                          "no CUDA device is visible to this process: the gpu-labelled tests "
                          "need an NVIDIA GPU and driver (CI excludes them with ctest -LE gpu)");
    backend = make_cuda_backend(0).release();
  }
  return *backend;
}

inline Backend& cpu() {
  static std::unique_ptr<Backend> backend = make_cpu_backend();
  return *backend;
}

// Device memory and a view of it.
struct DeviceTensor {
  Buffer buffer;
  Tensor tensor;
  operator Tensor() const { return tensor; }
};

inline DeviceTensor device_tensor(DType dtype, std::initializer_list<int64_t> shape) {
  DeviceTensor result;
  const Tensor probe(nullptr, dtype, shape, Device::CUDA);
  result.buffer = Buffer(gpu(), probe.bytes());
  result.tensor = Tensor(result.buffer.data(), dtype, shape, Device::CUDA);
  return result;
}

// A device tensor of `dtype` holding `values` (rounded to nearest even for bf16/fp16).
inline DeviceTensor upload(std::vector<float> values, DType dtype,
                           std::initializer_list<int64_t> shape) {
  DeviceTensor result = device_tensor(dtype, shape);
  BOOST_REQUIRE_EQUAL(static_cast<size_t>(result.tensor.numel()), values.size());
  gpu().copy(result.tensor, view(values, shape));
  return result;
}

// Integer tensors (ids, masks, row ids) copied as they are.
template <class Integer>
DeviceTensor upload_integers(std::vector<Integer> values, std::initializer_list<int64_t> shape) {
  DeviceTensor result = device_tensor(zt::test::dtype_of<Integer>(), shape);
  gpu().copy(result.tensor, view(values, shape));
  return result;
}

// An output tensor filled with NaN, so an element a kernel forgets to write fails the check.
inline DeviceTensor poisoned(DType dtype, std::initializer_list<int64_t> shape) {
  DeviceTensor result = device_tensor(dtype, shape);
  gpu().fill(result.tensor, kNaN);
  return result;
}

// The device tensor's values as fp32 on the host (waits for the GPU).
inline std::vector<float> download(const Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.numel()));
  Tensor host(values.data(), DType::F32, {tensor.numel()});
  gpu().copy(host, tensor.reshaped({tensor.numel()}));
  return values;
}

// `values` as a tensor of `dtype` stores them: what both backends take as input.
inline std::vector<float> rounded(std::vector<float> values, DType dtype) {
  for (float& value : values) value = round_to(dtype, value);
  return values;
}

// Two units of roundoff of the storage dtype (0 for fp32).
inline double dtype_rtol(DType dtype) {
  switch (dtype) {
    case DType::BF16: return std::ldexp(1.0, -7);
    case DType::F16: return std::ldexp(1.0, -10);
    default: return 0.0;
  }
}

// Checks gpu against cpu with the bound described at the top of this file.
inline void check_near(const std::vector<float>& gpu_values, const std::vector<float>& cpu_values,
                       DType dtype, double fp32_rtol, const std::string& what) {
  double squares = 0.0;
  for (float value : cpu_values) squares += static_cast<double>(value) * value;
  const double rms = cpu_values.empty() ? 0.0 : std::sqrt(squares / static_cast<double>(cpu_values.size()));
  const double rtol = std::max(fp32_rtol, dtype_rtol(dtype));
  zt::test::check_close(gpu_values, cpu_values, rtol, rtol * rms,
                        what + " (" + dtype_name(dtype) + ")");
}

// Bitwise equality of two float vectors (NaN equals NaN), naming the first difference.
inline void check_identical(const std::vector<float>& actual, const std::vector<float>& expected,
                            const std::string& what) {
  BOOST_REQUIRE_EQUAL(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool same = actual[i] == expected[i] || (std::isnan(actual[i]) && std::isnan(expected[i]));
    if (!same) {
      BOOST_ERROR(what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]);
      return;
    }
  }
}

// The float dtypes every op is tested in.
inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> dtypes = {DType::F32, DType::BF16, DType::F16};
  return dtypes;
}

}  // namespace zt::gpu_test
