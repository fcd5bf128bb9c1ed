// Shape checks every backend's ops share (free of OpenMP and CUDA, so both the CPU backend and
// nvcc-compiled CUDA code include it). Every message names the op, the argument and the problem.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/tensor.h"

namespace zt {

// Throws unless `tensor` has exactly this shape.
void expect_shape(const char* op, const char* arg, const Tensor& tensor, std::initializer_list<int64_t> shape);
// Throws unless `tensor` has `numel` elements (what `what` says it must match).
void expect_numel(const char* op, const char* arg, const Tensor& tensor, int64_t numel, const std::string& what);
// Throws unless the two tensors have the same shape.
void expect_same_shape(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                       const Tensor& other);

}  // namespace zt
