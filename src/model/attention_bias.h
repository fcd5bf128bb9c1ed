// V's bias, added after the attention instead of into V. Softmax rows sum to 1, so
//   attention(q, k, v + 1 b^T) = attention(q, k, v) + b   (per head),
// and the bias gradient is the column sum of d(attention output). Numerically this is not the
// same: a large common component of V (OPT's and Qwen2's v_proj bias) that goes through the
// attention leaves dO . b times the probabilities' rounding error in every dS term of the
// backward (delta = rowsum(dO * out) is taken from an output whose P was rounded once, as
// cuDNN and FlashAttention do), 7% of a gradient's norm on a tiny OPT (issue 15). Outside the
// attention the bias is exact for every attention variant.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace zt {

// att[N, H*D] += bias[Hkv*D], kv head j's D values added to each of its H/Hkv query heads.
void add_value_bias(Backend& backend, Tensor att, Tensor bias, int64_t heads, int64_t kv_heads, int64_t head_dim);
// out_proj's input: att + bias in `scratch` [N, H*D] (bias empty: att itself). att stays the
// attention's own output, which its backward needs (delta = rowsum(dO * out)).
Tensor with_value_bias(Backend& backend, Tensor scratch, Tensor att, Tensor bias, int64_t heads, int64_t kv_heads,
                       int64_t head_dim);
// bias_grad[Hkv*D] (fp32) += the column sums of d_att[N, H*D], summed over the query heads of
// each kv head.
void value_bias_backward(Backend& backend, Tensor bias_grad, Tensor d_att, int64_t heads, int64_t kv_heads,
                         int64_t head_dim);

}  // namespace zt
