// Shared backend argument checks (see arg_checks.h).
#include "backend/arg_checks.h"

#include "core/block_quant.h"

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

EmbeddingDims embedding_dims(const char* op, const char* rows_arg, const Tensor& rows, const char* table_arg,
                             const Tensor& table, const Tensor& ids) {
  EmbeddingDims dims;
  int64_t table_cols = 0;
  matrix_dims(op, rows_arg, rows, dims.rows, dims.cols);
  matrix_dims(op, table_arg, table, dims.vocab, table_cols);
  ZT_CHECK(table_cols == dims.cols, op, ": ", rows_arg, " ", rows.describe(), " and ", table_arg, " ",
           table.describe(), " must have the same number of channels");
  expect_numel(op, "ids", ids, dims.rows, cat("one id per row of ", rows_arg));
  return dims;
}

namespace {
// q[B,T,H,D] and k[B,S,Hkv,D] (`k_layout`: k's layout as the message names it) with H a multiple
// of Hkv: their sizes (keys: S).
CachedAttentionDims query_key_dims(const char* op, const Tensor& q, const Tensor& k, const char* k_layout) {
  ZT_CHECK(q.ndim == 4, op, ": q must be [B, T, H, D], got ", q.describe());
  ZT_CHECK(k.ndim == 4, op, ": k must be ", k_layout, ", got ", k.describe());
  CachedAttentionDims dims;
  dims.batch = q.dim(0);
  dims.queries = q.dim(1);
  dims.heads = q.dim(2);
  dims.head_dim = q.dim(3);
  dims.keys = k.dim(1);
  dims.kv_heads = k.dim(2);
  ZT_CHECK(dims.kv_heads > 0 && dims.heads % dims.kv_heads == 0, op, ": query heads H = ", dims.heads,
           " must be a multiple of key/value heads Hkv = ", dims.kv_heads);
  return dims;
}
}  // namespace

AttentionShape attention_shape(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const char* out_arg, const Tensor& lse) {
  const CachedAttentionDims dims = query_key_dims(op, q, k, "[B, T, Hkv, D]");
  const AttentionShape shape{dims.batch, dims.queries, dims.heads, dims.kv_heads, dims.head_dim};
  ZT_CHECK(shape.head_dim > 0, op, ": head dim D must be positive, got ", q.describe());
  expect_shape(op, "k", k, {shape.batch, shape.time, shape.kv_heads, shape.head_dim});
  expect_same_shape(op, "v", v, "k", k);
  expect_same_shape(op, out_arg, out, "q", q);
  expect_shape(op, "lse", lse, {shape.batch, shape.heads, shape.time});
  return shape;
}

CachedAttentionDims cached_attention_dims(const char* op, const Tensor& out, const Tensor& q, const Tensor& k,
                                          const Tensor& v) {
  const CachedAttentionDims dims = query_key_dims(op, q, k, "[B, S, Hkv, D] (the cached keys)");
  ZT_CHECK(dims.queries <= dims.keys, op, ": the T = ", dims.queries, " new queries must be among the S = ", dims.keys,
           " cached keys (T <= S)");
  expect_shape(op, "k", k, {dims.batch, dims.keys, dims.kv_heads, dims.head_dim});
  expect_same_shape(op, "v", v, "k", k);
  expect_same_shape(op, "out", out, "q", q);
  return dims;
}

int64_t expect_quant4_view(const char* op, const Quant4View& weight, int64_t n) {
  ZT_CHECK(weight.blocksize > 0, op, ": blocksize ", weight.blocksize, " must be positive");
  const int64_t blocks = (n + weight.blocksize - 1) / weight.blocksize;
  auto expect = [&](const char* arg, const Tensor& tensor, DType dtype, int64_t numel, const char* what) {
    ZT_CHECK(tensor.dtype == dtype, op, ": ", arg, " must be ", dtype_name(dtype), ", got ", tensor.describe());
    expect_numel(op, arg, tensor, numel, what);
  };
  expect("packed", weight.packed, DType::U8, (n + 1) / 2, "ceil(elements of out / 2)");
  expect("code", weight.code, DType::F32, 16, "the 16 entries of a 4-bit code table");
  if (!weight.nested()) {
    expect("absmax", weight.absmax, DType::F32, blocks, "the blocks of out");
    return blocks;
  }
  expect("absmax", weight.absmax, DType::U8, blocks, "the blocks of out (8-bit with double quantization)");
  expect("nested_absmax", weight.nested_absmax, DType::F32, (blocks + 255) / 256, "ceil(blocks / 256)");
  expect("nested_code", weight.nested_code, DType::F32, 256, "the 256 entries of the 8-bit table");
  expect("nested_offset", weight.nested_offset, DType::F32, 1, "one offset");
  return blocks;
}

int64_t expect_block_quant(const char* op, const Tensor& q, const Tensor& scales, int64_t n, int bits, int64_t block) {
  ZT_CHECK(bits == 8 || bits == 4, op, ": bits ", bits, " must be 8 or 4");
  ZT_CHECK(block > 0 && block % 2 == 0, op, ": block ", block, " must be positive and even (int4 packs pairs)");
  ZT_CHECK(q.dtype == DType::U8, op, ": q must be uint8, got ", q.describe());
  ZT_CHECK(scales.dtype == DType::F32, op, ": scales must be fp32, got ", scales.describe());
  expect_numel(op, "q", q, block_quant_bytes(n, bits), bits == 8 ? "the values (one byte each)" : "ceil(values / 2)");
  const int64_t blocks = block_quant_blocks(n, block);
  expect_numel(op, "scales", scales, blocks, "ceil(values / block)");
  return blocks;
}

int64_t expect_numel_of_param(const char* op, const Tensor& param, std::initializer_list<NamedTensor> others) {
  const int64_t n = param.numel();
  for (const NamedTensor& other : others) expect_numel(op, other.name, other.tensor, n, "the elements of param");
  return n;
}

}  // namespace zt
