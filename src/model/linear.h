// LinearLayer: y = x W^T (+ b) (+ LoRA: dropout(x) A^T B^T * scaling), with its explicit
// backward. Frozen weights (empty gradient views) get no weight-gradient GEMM: that is where
// LoRA saves its compute.
#pragma once
#include <cstdint>
#include <string>

#include "backend/buffer.h"
#include "model/param_store.h"

namespace zt {

// What a forward pass's layers need beyond their inputs: what dropout needs to draw a mask that
// depends only on (seed, module, step, token position), and whether the LoRA adapters run.
struct DropoutContext {
  uint64_t seed = 0;
  uint32_t step = 0;  // optimizer step: a sample sees a fresh mask each epoch
  Tensor row_ids;     // int64 [N] global token positions of the micro-batch
  bool training = true;  // false in evaluation: dropout is the identity
  // false: every LinearLayer runs its base weight only, as PEFT's `with model.disable_adapter()`
  // (DPO's reference model under LoRA: train/dpo_objective.cpp). No backward follows such a pass.
  bool adapters = true;
};

// Per-call-site tensors a LoRA linear keeps from forward for backward (in the activation dtype,
// which is the dtype of the layer's weights: the compute dtype).
struct LoraSaved {
  Buffer dropped_x;  // [N, in]: dropout(x) (only when dropout > 0)
  Buffer z;          // [N, r]:  dropout(x) A^T
};

class LinearLayer {
 public:
  LinearLayer() = default;
  // `path` is the module path, e.g. "model.layers.0.self_attn.q_proj"; the weight is
  // path + ".weight", an optional bias path + ".bias", optional adapters path + ".lora_A.weight".
  LinearLayer(const ParamStore& store, const std::string& path, float lora_scaling, float lora_dropout,
              uint32_t dropout_stream);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool has_lora() const { return !lora_a_.empty(); }
  int64_t lora_rank() const { return rank_; }
  DType dtype() const { return dtype_; }  // the compute dtype of weights and activations
  bool quantized() const { return !weight_q_.packed.empty(); }
  // Multiply-adds per token of the forward pass (incl. the adapter), and the part of them whose
  // weights are trainable (each of those costs one more GEMM in backward for its gradient).
  double macs_per_token() const;
  double trainable_macs_per_token() const;

  // y[N,out] = x[N,in] W^T + b + LoRA term. `saved` must hold room for N rows (ensure_saved).
  void forward(Backend& backend, Tensor y, Tensor x, LoraSaved& saved, const DropoutContext& dropout) const;
  // dx[N,in] = dy W (+ LoRA path), written (accumulate_dx=false) or added (true);
  // dW += dy^T x, db += sum(dy), dA, dB += for trainable parameters.
  // Activations x, y, dx, dy, lora_dz and scratch are in the compute dtype (the weights' dtype);
  // weight gradients are fp32. `scratch` has room for N*in elements (LoRA dropout backward).
  void backward(Backend& backend, Tensor dx, bool accumulate_dx, Tensor dy, Tensor x, const LoraSaved& saved,
                const DropoutContext& dropout, Tensor lora_dz, Tensor scratch) const;
  // Makes `saved` large enough for `rows` rows.
  void ensure_saved(Backend& backend, LoraSaved& saved, int64_t rows) const;
  // The bias is the caller's (attention's v_proj: model/attention_bias.h): forward and backward
  // leave it out, bias() and bias_grad() give it (empty when the layer has none / it is frozen).
  void defer_bias() { bias_deferred_ = true; }
  Tensor bias() const { return bias_; }
  Tensor bias_grad() const { return bias_grad_; }

 private:
  // The base weight for a GEMM: W itself, or a 4-bit W dequantized into the store's workspace.
  Tensor base_weight(Backend& backend) const;
  Tensor weight_, weight_grad_;  // [out, in] (weight_ empty when 4-bit)
  Quant4View weight_q_;          // a 4-bit (frozen) base weight, else empty
  Tensor workspace_;             // compute dtype [>= out * in] when 4-bit
  DType dtype_ = DType::F32;
  Tensor bias_, bias_grad_;      // [out] or empty
  Tensor lora_a_, lora_a_grad_;  // [r, in] or empty
  Tensor lora_b_, lora_b_grad_;  // [out, r] or empty
  int64_t in_ = 0, out_ = 0, rank_ = 0;
  float scaling_ = 0.0f;
  float dropout_ = 0.0f;
  uint32_t dropout_stream_ = 0;
  bool bias_deferred_ = false;
};

}  // namespace zt
