// Tensor: a non-owning view (pointer, dtype, shape, device) into memory some arena or buffer
// owns. Row-major, contiguous. Views are cheap to copy and are how every Backend op is called.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace zt {

enum class Device : uint8_t { CPU, CUDA };

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> shape_, Device device_ = Device::CPU);

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const;  // negative i counts from the end
  bool empty() const { return data == nullptr; }

  // Typed access to the data (checks the dtype, and on CPU that the data is host memory).
  float* f32() const;
  int32_t* i32() const;
  uint8_t* u8() const;

  // The same memory seen with another shape of the same number of elements.
  Tensor reshaped(std::initializer_list<int64_t> new_shape) const;
  // The first elements of this tensor's memory seen with `new_shape` (scratch space reuse).
  Tensor first(std::initializer_list<int64_t> new_shape) const;
  // Rows [begin, begin+count) of the first dimension.
  Tensor rows(int64_t begin, int64_t count) const;

  std::string describe() const;  // "fp32[4, 16] cpu"
};

inline Tensor f32_view(float* data, std::initializer_list<int64_t> shape) {
  return Tensor(data, DType::F32, shape);
}

}  // namespace zt
