// Tensor view helpers: element counts, typed access with checks, reshapes and row slices.
#include "core/tensor.h"

namespace zt {

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> shape_, Device device_)
    : data(data_), dtype(dtype_), device(device_), ndim(static_cast<int>(shape_.size())) {
  ZT_CHECK(ndim <= kMaxDims, "tensor with ", ndim, " dimensions (at most ", kMaxDims, ")");
  int i = 0;
  for (int64_t extent : shape_) {
    ZT_CHECK(extent >= 0, "tensor dimension ", i, " is negative (", extent, ")");
    shape[static_cast<size_t>(i++)] = extent;
  }
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int i = 0; i < ndim; ++i) count *= shape[static_cast<size_t>(i)];
  return count;
}

int64_t Tensor::dim(int i) const {
  int index = i < 0 ? ndim + i : i;
  ZT_CHECK(index >= 0 && index < ndim, "dimension ", i, " of ", describe());
  return shape[static_cast<size_t>(index)];
}

float* Tensor::f32() const {
  ZT_CHECK(dtype == DType::F32, "expected an fp32 tensor, got ", describe());
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  ZT_CHECK(dtype == DType::I32, "expected an int32 tensor, got ", describe());
  return static_cast<int32_t*>(data);
}

uint8_t* Tensor::u8() const {
  ZT_CHECK(dtype == DType::U8, "expected a uint8 tensor, got ", describe());
  return static_cast<uint8_t*>(data);
}

Tensor Tensor::reshaped(std::initializer_list<int64_t> new_shape) const {
  Tensor view(data, dtype, new_shape, device);
  ZT_CHECK(view.numel() == numel(), "cannot reshape ", describe(), " to ", view.describe());
  return view;
}

Tensor Tensor::first(std::initializer_list<int64_t> new_shape) const {
  Tensor view(data, dtype, new_shape, device);
  ZT_CHECK(view.numel() <= numel(), "cannot take ", view.describe(), " from ", describe());
  return view;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  ZT_CHECK(ndim >= 1 && begin >= 0 && count >= 0 && begin + count <= shape[0],
           "rows [", begin, ", ", begin + count, ") of ", describe());
  Tensor view = *this;
  int64_t row_elements = shape[0] == 0 ? 0 : numel() / shape[0];
  view.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_elements) * dtype_size(dtype);
  view.shape[0] = count;
  return view;
}

std::string Tensor::describe() const {
  std::string text = cat(dtype_name(dtype), "[");
  for (int i = 0; i < ndim; ++i) text += cat(i ? ", " : "", shape[static_cast<size_t>(i)]);
  return text + (device == Device::CPU ? "] cpu" : "] cuda");
}

}  // namespace zt
