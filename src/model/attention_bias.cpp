// V's bias after the attention (see attention_bias.h). With as many kv heads as query heads the
// bias lines up with att's columns; with grouped-query heads each kv head's slice is repeated
// for its group (H slices of D values: small device copies, no new backend op).
#include "model/attention_bias.h"

#include "backend/buffer.h"
#include "core/error.h"

namespace zt {

namespace {

void check_value_bias(const char* op, const Tensor& bias, const Tensor& att, int64_t heads, int64_t kv_heads,
                      int64_t head_dim) {
  ZT_CHECK(kv_heads > 0 && heads % kv_heads == 0, op, ": heads ", heads, " must be a multiple of kv heads ", kv_heads);
  ZT_CHECK(bias.numel() == kv_heads * head_dim, op, ": bias ", bias.describe(), " must hold kv heads x head dim = ",
           kv_heads * head_dim, " values");
  ZT_CHECK(att.ndim == 2 && att.dim(1) == heads * head_dim, op, ": attention output ", att.describe(),
           " must be [N, heads x head dim = ", heads * head_dim, "]");
}

}  // namespace

void add_value_bias(Backend& backend, Tensor att, Tensor bias, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  check_value_bias("add_value_bias", bias, att, heads, kv_heads, head_dim);
  if (heads == kv_heads) {
    backend.add_bias(att, bias);
    return;
  }
  const int64_t group = heads / kv_heads;
  Buffer repeated(backend, static_cast<size_t>(heads * head_dim) * dtype_size(bias.dtype));  // [H*D]
  const Tensor all = repeated.view(bias.dtype, {heads * head_dim});
  for (int64_t head = 0; head < heads; ++head) {
    backend.copy(all.rows(head * head_dim, head_dim), bias.rows(head / group * head_dim, head_dim));
  }
  backend.add_bias(att, all);
}

Tensor with_value_bias(Backend& backend, Tensor scratch, Tensor att, Tensor bias, int64_t heads, int64_t kv_heads,
                       int64_t head_dim) {
  if (bias.empty()) return att;
  Tensor biased = scratch.first({att.dim(0), att.dim(1)});
  backend.copy(biased, att);
  add_value_bias(backend, biased, bias, heads, kv_heads, head_dim);
  return biased;
}

void value_bias_backward(Backend& backend, Tensor bias_grad, Tensor d_att, int64_t heads, int64_t kv_heads,
                         int64_t head_dim) {
  check_value_bias("value_bias_backward", bias_grad, d_att, heads, kv_heads, head_dim);
  if (heads == kv_heads) {
    backend.bias_backward(bias_grad, d_att);
    return;
  }
  const int64_t group = heads / kv_heads;
  Buffer sums(backend, static_cast<size_t>(heads * head_dim) * sizeof(float));  // [H*D] fp32
  const Tensor per_head = sums.view(DType::F32, {heads * head_dim});
  backend.fill(per_head, 0.0f);
  backend.bias_backward(per_head, d_att);
  for (int64_t head = 0; head < heads; ++head) {
    backend.accumulate(bias_grad.rows(head / group * head_dim, head_dim), per_head.rows(head * head_dim, head_dim),
                       1.0f);
  }
}

}  // namespace zt
