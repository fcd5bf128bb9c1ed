// Buffer: memory owned through a Backend (host or device), released when the Buffer dies.
// Arenas, flat parameter buffers and activations are Buffers; ops see them as Tensor views.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <utility>

#include "backend/backend.h"

namespace zt {

class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& backend, size_t bytes) : backend_(&backend), bytes_(bytes) {
    data_ = bytes ? backend.allocate(bytes) : nullptr;
  }
  // Memory whose pages the backend may discard and commit (Backend::allocate_discardable).
  struct Discardable {
    bool committed = true;  // false: no memory until committed
  };
  Buffer(Backend& backend, size_t bytes, Discardable discardable) : backend_(&backend), bytes_(bytes) {
    data_ = bytes ? backend.allocate_discardable(bytes, discardable.committed) : nullptr;
  }
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  void reset() {
    if (data_) backend_->release(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // A view of the whole buffer (or its first elements) with the given dtype and shape.
  Tensor view(DType dtype, std::initializer_list<int64_t> shape) const {
    Tensor tensor(data_, dtype, shape, backend_ ? backend_->device() : Device::CPU);
    ZT_CHECK(tensor.bytes() <= bytes_, "view ", tensor.describe(), " exceeds its buffer of ", bytes_, " bytes");
    return tensor;
  }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A 1-D view of a buffer's first numel elements of dtype: how flat parameter, gradient and
// optimizer-state buffers are read.
inline Tensor flat_view(const Buffer& buffer, DType dtype, int64_t numel) { return buffer.view(dtype, {numel}); }
inline Tensor flat_f32(const Buffer& buffer, int64_t numel) { return flat_view(buffer, DType::F32, numel); }

// Grows `buffer` to hold `elements` values of `dtype`: a new allocation when it is smaller (its
// contents are not kept), nothing when it is large enough, so steady-state steps allocate nothing.
inline void ensure_buffer(Buffer& buffer, Backend& backend, int64_t elements, DType dtype) {
  const size_t bytes = static_cast<size_t>(elements) * dtype_size(dtype);
  if (buffer.bytes() < bytes) buffer = Buffer(backend, bytes);
}

}  // namespace zt
