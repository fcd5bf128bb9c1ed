// The linear layer with optional bias and LoRA adapter: forward and explicit backward.
#include "model/linear.h"

#include "core/rng.h"

namespace zt {


LinearLayer::LinearLayer(const ParamStore& store, const std::string& path, float lora_scaling, float lora_dropout,
                         uint32_t dropout_stream)
    : scaling_(lora_scaling), dropout_(lora_dropout), dropout_stream_(dropout_stream) {
  const ParamEntry& weight = store.entry(path + ".weight");
  out_ = weight.spec.shape[0];
  in_ = weight.spec.shape[1];
  dtype_ = store.param_dtype();
  if (weight.quant.enabled()) {  // QLoRA: frozen and 4-bit, dequantized before each GEMM
    weight_q_ = store.quant4_view(path + ".weight");
    workspace_ = store.dequant_workspace();
  } else {
    weight_ = store.param(path + ".weight");
    weight_grad_ = store.grad(path + ".weight");
  }
  if (store.contains(path + ".bias")) {
    bias_ = store.param(path + ".bias");
    bias_grad_ = store.grad(path + ".bias");
  }
  if (store.contains(path + ".lora_A.weight")) {
    lora_a_ = store.param(path + ".lora_A.weight");
    lora_a_grad_ = store.grad(path + ".lora_A.weight");
    lora_b_ = store.param(path + ".lora_B.weight");
    lora_b_grad_ = store.grad(path + ".lora_B.weight");
    rank_ = lora_a_.dim(0);
  }
}

double LinearLayer::macs_per_token() const {
  return static_cast<double>(in_ * out_ + rank_ * (in_ + out_));
}

double LinearLayer::trainable_macs_per_token() const {
  double macs = static_cast<double>(rank_ * (in_ + out_));  // adapters are always trainable
  if (!weight_grad_.empty()) macs += static_cast<double>(in_ * out_);
  return macs;
}

Tensor LinearLayer::base_weight(Backend& backend) const {
  if (!quantized()) return weight_;
  Tensor weight = workspace_.first({out_, in_});  // [out, in] compute dtype
  backend.dequantize_4bit(weight.reshaped({out_ * in_}), weight_q_);
  return weight;
}

void LinearLayer::ensure_saved(Backend& backend, LoraSaved& saved, int64_t rows) const {
  if (!has_lora()) return;
  ensure_buffer(saved.z, backend, rows * rank_, dtype());
  if (dropout_ > 0.0f) ensure_buffer(saved.dropped_x, backend, rows * in_, dtype());
}

void LinearLayer::forward(Backend& backend, Tensor y, Tensor x, LoraSaved& saved, const DropoutContext& dropout) const {
  const int64_t n = x.dim(0);
  backend.matmul_bias(y, x, base_weight(backend), bias_deferred_ ? Tensor() : bias_);  // y[N,out] = x[N,in] W^T + b
  if (!has_lora() || !dropout.adapters) return;
  Tensor adapter_input = x;  // [N, in]
  if (dropout_ > 0.0f && dropout.training) {
    adapter_input = saved.dropped_x.view(dtype(), {n, in_});
    RngKey key{dropout.seed, dropout_stream_, dropout.step};
    backend.dropout(adapter_input, x, dropout_, key, dropout.row_ids);
  }
  Tensor z = saved.z.view(dtype(), {n, rank_});                        // [N, r]
  backend.matmul(z, adapter_input, false, lora_a_, true, 1.0f, 0.0f);  // z = xd A^T
  backend.matmul(y, z, false, lora_b_, true, scaling_, 1.0f);          // y += s * z B^T
}

void LinearLayer::backward(Backend& backend, Tensor dx, bool accumulate_dx, Tensor dy, Tensor x,
                           const LoraSaved& saved, const DropoutContext& dropout, Tensor lora_dz,
                           Tensor scratch) const {
  const int64_t n = x.dim(0);
  ZT_CHECK(dropout.training || dropout_ == 0.0f, "LinearLayer: backward after an evaluation forward");
  ZT_CHECK(dropout.adapters || !has_lora(), "LinearLayer: backward after a forward with the adapters disabled");
  if (!weight_grad_.empty()) backend.matmul(weight_grad_, dy, true, x, false, 1.0f, 1.0f);  // dW += dy^T x
  if (!bias_grad_.empty() && !bias_deferred_) backend.bias_backward(bias_grad_, dy);
  backend.matmul(dx, dy, false, base_weight(backend), false, 1.0f, accumulate_dx ? 1.0f : 0.0f);  // dx = dy W
  if (!has_lora()) return;
  Tensor adapter_input = dropout_ > 0.0f ? saved.dropped_x.view(dtype(), {n, in_}) : x;  // [N, in]
  Tensor z = saved.z.view(dtype(), {n, rank_});                                          // [N, r]
  Tensor dz = lora_dz.first({n, rank_});  // the caller's scratch may be larger
  if (!lora_b_grad_.empty()) backend.matmul(lora_b_grad_, dy, true, z, false, scaling_, 1.0f);  // dB += s dy^T z
  backend.matmul(dz, dy, false, lora_b_, false, scaling_, 0.0f);                                  // dz = s dy B
  if (!lora_a_grad_.empty()) backend.matmul(lora_a_grad_, dz, true, adapter_input, false, 1.0f, 1.0f);  // dA += dz^T xd
  if (dropout_ <= 0.0f) {
    backend.matmul(dx, dz, false, lora_a_, false, 1.0f, 1.0f);  // dx += dz A
    return;
  }
  Tensor dxd = scratch.first({n, in_});  // [N, in]
  backend.matmul(dxd, dz, false, lora_a_, false, 1.0f, 0.0f);
  RngKey key{dropout.seed, dropout_stream_, dropout.step};
  backend.dropout(dxd, dxd, dropout_, key, dropout.row_ids);  // the same mask: dropout is linear
  backend.accumulate(dx, dxd, 1.0f);
}

}  // namespace zt
