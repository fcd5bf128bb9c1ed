// NormLayer: RMSNorm (LLaMA family) or LayerNorm (OPT) over the last dimension, with its
// explicit backward; used by the blocks and the decoder skeleton's final norm alike.
// A LayerNorm without elementwise affine (OPT layer_norm_elementwise_affine=false) computes
// with constant weight 1 and bias 0 that are not parameters.
#pragma once
#include <string>

#include "backend/buffer.h"
#include "model/config.h"
#include "model/param_store.h"

namespace zt {

// What a norm's forward keeps for backward: fp32 [N] statistics (mean: LayerNorm only).
struct NormSaved {
  Buffer mean, rstd;
};

class NormLayer {
 public:
  NormLayer() = default;
  // `path` is the module path, e.g. "model.layers.0.input_layernorm" (weight path + ".weight",
  // LayerNorm's bias path + ".bias"); `width` is C.
  NormLayer(const ParamStore& store, Backend& backend, const std::string& path, const ModelConfig& config, int64_t width);

  // y[N,C] = norm(x[N,C]).
  void forward(Backend& backend, Tensor y, Tensor x, NormSaved& saved) const;
  // dx[N,C] = or += (dx_store: Add for a pre-norm block's input, whose gradient is the residual
  // stream's); the weight's and bias's gradients += (when trainable).
  void backward(Backend& backend, Tensor dx, GradStore dx_store, Tensor dy, Tensor x, const NormSaved& saved) const;
  void ensure_saved(Backend& backend, NormSaved& saved, int64_t rows) const;
  // square, sum, scale, weight: 4 per element (--profile-step's norm FLOPs)
  double flops(int64_t rows) const { return 4.0 * static_cast<double>(rows * width_); }

 private:
  NormKind kind_ = NormKind::RMSNorm;
  float eps_ = 1e-6f;
  int64_t width_ = 0;
  Tensor weight_, weight_grad_;  // [C]
  Tensor bias_, bias_grad_;      // [C] (LayerNorm)
  Buffer constants_;             // [2C] ones then zeros: a LayerNorm without affine parameters
};

}  // namespace zt
