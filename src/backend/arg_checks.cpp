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

AdalomoShape adalomo_shape(const char* op, const char* row_arg, const Tensor& row, const char* col_arg,
                           const Tensor& col, const Tensor& grad, int64_t offset) {
  AdalomoShape shape;
  shape.rows = row.numel();
  shape.factored = !col.empty();
  shape.cols = shape.factored ? col.numel() : 1;
  ZT_CHECK(shape.rows > 0, op, ": ", row_arg, " has no elements (the tensor has at least one row)");
  ZT_CHECK(offset >= 0 && offset + grad.numel() <= shape.rows * shape.cols, op, ": grad's ", grad.numel(),
           " elements at offset ", offset, " do not fit the tensor [", shape.rows, ", ", shape.cols, "] that ", row_arg,
           " and ", col_arg, " describe");
  return shape;
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

namespace {
// rows x cols of a tensor seen as a matrix (rows: the product of the leading dimensions).
void matrix_dims(const char* op, const char* arg, const Tensor& tensor, int64_t& rows, int64_t& cols) {
  ZT_CHECK(tensor.ndim >= 1, op, ": ", arg, " must have at least one dimension, got ", tensor.describe());
  cols = tensor.dim(-1);
  rows = 1;
  for (int i = 0; i + 1 < tensor.ndim; ++i) rows *= tensor.shape[static_cast<size_t>(i)];
}
}  // namespace

GemmDims matmul_dims(const Tensor& c, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                     const char* op) {
  int64_t c_rows, c_cols, a_rows, a_cols, b_rows, b_cols;
  matrix_dims(op, "c", c, c_rows, c_cols);
  matrix_dims(op, "a", a, a_rows, a_cols);
  matrix_dims(op, "b", b, b_rows, b_cols);
  GemmDims dims;
  dims.m = c_rows;
  dims.n = c_cols;
  dims.k = transpose_a ? a_rows : a_cols;
  const int64_t op_a_rows = transpose_a ? a_cols : a_rows;
  const int64_t op_b_rows = transpose_b ? b_cols : b_rows, op_b_cols = transpose_b ? b_rows : b_cols;
  ZT_CHECK(op_a_rows == dims.m && op_b_cols == dims.n && op_b_rows == dims.k, op, ": shapes do not agree: c ",
           c.describe(), " = a", transpose_a ? "^T " : " ", a.describe(), " x b", transpose_b ? "^T " : " ",
           b.describe());
  return dims;
}

}  // namespace zt
