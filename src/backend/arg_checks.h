// Shape checks every backend's ops share (free of OpenMP and CUDA, so both the CPU backend and
// nvcc-compiled CUDA code include it). Every message names the op, the argument and the problem.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <initializer_list>
#include <string>

#include "backend/backend.h"
#include "core/tensor.h"

namespace zt {

// Throws unless `tensor` has exactly this shape.
void expect_shape(const char* op, const char* arg, const Tensor& tensor, std::initializer_list<int64_t> shape);
// Throws unless `tensor` has `numel` elements (what `what` says it must match).
void expect_numel(const char* op, const char* arg, const Tensor& tensor, int64_t numel, const std::string& what);
// The optimizer kernels' rule: every named tensor has as many elements as `param`; returns them.
struct NamedTensor {
  const char* name;
  const Tensor& tensor;
};
int64_t expect_numel_of_param(const char* op, const Tensor& param, std::initializer_list<NamedTensor> others);
// Throws unless the two tensors have the same shape.
void expect_same_shape(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                       const Tensor& other);

// The sizes of C[M,N] = op(A) op(B) (op(A) [M,K], op(B) [K,N]); each tensor is seen as a matrix
// of its last dimension's columns and its leading dimensions' rows. Throws unless they agree.
struct GemmDims {
  int64_t m = 0, n = 0, k = 0;
};
// `op` names the operation in the message (matmul, matmul_bias).
GemmDims matmul_dims(const Tensor& c, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                     const char* op = "matmul");

// The [rows, cols] tensor the adalomo_* ops see (backend.h), from their row [R] and col [C]
// arguments (col empty: a vector, [R, 1], with no column state), after checking that grad[n] at
// `offset` lies inside it.
struct AdalomoShape {
  int64_t rows = 0, cols = 1;
  bool factored = false;  // a matrix, with column state
};
AdalomoShape adalomo_shape(const char* op, const char* row_arg, const Tensor& row, const char* col_arg,
                           const Tensor& col, const Tensor& grad, int64_t offset);

// The sizes of embedding_forward/backward (backend.h): `rows_arg` (out, or dout) [N, C] and
// `table_arg` (table, or dtable) [V, C], each seen as a matrix of its last dimension's columns
// and its leading dimensions' rows, and ids with one id per row. Throws naming the arguments
// unless they agree (dtypes, devices and the ids' values are each backend's to check).
struct EmbeddingDims {
  int64_t rows = 0, cols = 0, vocab = 0;  // N, C, V
};
EmbeddingDims embedding_dims(const char* op, const char* rows_arg, const Tensor& rows, const char* table_arg,
                             const Tensor& table, const Tensor& ids);

// The sizes of attention_forward/backward (backend.h): q[B,T,H,D], k,v[B,T,Hkv,D] with H a
// multiple of Hkv and D > 0, `out_arg` (out, or dout) like q, lse[B,H,T]. Throws naming the
// argument unless they agree (dtypes and devices are each backend's to check).
struct AttentionShape {
  int64_t batch = 0, time = 0, heads = 0, kv_heads = 0, head_dim = 0;  // B, T, H, Hkv, D
};
AttentionShape attention_shape(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const char* out_arg, const Tensor& lse);

// The sizes of attention_cached_forward (backend.h): q[B,T,H,D], k,v[B,S,Hkv,D] with T <= S and
// H a multiple of Hkv, out like q. Throws naming the argument unless they agree (dtypes and
// devices are each backend's to check).
struct CachedAttentionDims {
  int64_t batch = 0, queries = 0, keys = 0, heads = 0, kv_heads = 0, head_dim = 0;  // B, T, S, H, Hkv, D
};
CachedAttentionDims cached_attention_dims(const char* op, const Tensor& out, const Tensor& q, const Tensor& k,
                                          const Tensor& v);

// Throws unless the pieces of `weight` have the dtypes and sizes of a 4-bit tensor of n values
// (backend.h "dequantize_4bit"); returns its number of blocks.
int64_t expect_quant4_view(const char* op, const Quant4View& weight, int64_t n);

// Throws unless q (uint8) and scales (fp32) hold n values quantized to `bits` (8 or 4) in blocks
// of `block` (backend.h "quantize_blocks"); returns the number of blocks.
int64_t expect_block_quant(const char* op, const Tensor& q, const Tensor& scales, int64_t n, int bits, int64_t block);

// The integer a fill() value stands for in an integer tensor (masks, ids): a whole number in
// the type's range, else an error naming the tensor.
template <class Integer>
Integer integer_fill_value(const Tensor& dst, float value) {
  const double low = static_cast<double>(std::numeric_limits<Integer>::min());
  const double high = static_cast<double>(std::numeric_limits<Integer>::max());
  ZT_CHECK(std::trunc(value) == value && value >= low && value < high + 1.0, "fill: value ", value,
           " is not representable in ", dst.describe());
  return static_cast<Integer>(value);
}

}  // namespace zt
