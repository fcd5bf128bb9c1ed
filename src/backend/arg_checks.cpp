// Shared backend argument checks (see arg_checks.h).
#include "backend/arg_checks.h"

namespace zt {

void expect_shape(const char* op, const char* arg, const Tensor& tensor, std::initializer_list<int64_t> shape) {
  bool same = tensor.ndim == static_cast<int>(shape.size());
  std::string wanted = "[";
  int i = 0;
  for (int64_t extent : shape) {
    if (same && tensor.shape[static_cast<size_t>(i)] != extent) same = false;
    wanted += cat(i++ ? ", " : "", extent);
  }
  ZT_CHECK(same, op, ": ", arg, " must have shape ", wanted, "], got ", tensor.describe());
}

void expect_numel(const char* op, const char* arg, const Tensor& tensor, int64_t numel, const std::string& what) {
  ZT_CHECK(tensor.numel() == numel, op, ": ", arg, " must have ", numel, " elements (", what, "), got ",
           tensor.describe());
}

void expect_same_shape(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                       const Tensor& other) {
  bool same = tensor.ndim == other.ndim;
  for (int i = 0; same && i < tensor.ndim; ++i)
    same = tensor.shape[static_cast<size_t>(i)] == other.shape[static_cast<size_t>(i)];
  ZT_CHECK(same, op, ": ", arg, " ", tensor.describe(), " and ", other_arg, " ", other.describe(),
           " must have the same shape");
}

}  // namespace zt
