// RMSNorm / LayerNorm layers over the backend's fused norm ops (norm.h).
#include "model/norm.h"

#include <vector>

namespace zt {

NormLayer::NormLayer(const ParamStore& store, Backend& backend, const std::string& path, const ModelConfig& config,
                     int64_t width)
    : kind_(config.norm), eps_(static_cast<float>(config.norm_eps)), width_(width) {
  if (kind_ == NormKind::RMSNorm || config.norm_affine) {
    weight_ = store.param(path + ".weight");
    weight_grad_ = store.grad(path + ".weight");
    if (kind_ == NormKind::LayerNorm) {
      bias_ = store.param(path + ".bias");
      bias_grad_ = store.grad(path + ".bias");
    }
    return;
  }
  std::vector<float> host(static_cast<size_t>(2 * width), 1.0f);  // [2C]: weight 1, then bias 0
  std::fill(host.begin() + width, host.end(), 0.0f);
  const DType dtype = store.param_dtype();
  constants_ = Buffer(backend, static_cast<size_t>(2 * width) * dtype_size(dtype));
  backend.copy(constants_.view(dtype, {2 * width}), Tensor(host.data(), DType::F32, {2 * width}));
  weight_ = constants_.view(dtype, {width});
  bias_ = constants_.view(dtype, {2 * width}).rows(width, width);
}

void NormLayer::ensure_saved(Backend& backend, NormSaved& saved, int64_t rows) const {
  ensure_buffer(saved.rstd, backend, rows, DType::F32);
  if (kind_ == NormKind::LayerNorm) ensure_buffer(saved.mean, backend, rows, DType::F32);
}

void NormLayer::forward(Backend& backend, Tensor y, Tensor x, NormSaved& saved) const {
  const int64_t n = x.shape[0];
  if (kind_ == NormKind::RMSNorm) {
    backend.rmsnorm_forward(y, saved.rstd.view(DType::F32, {n}), x, weight_, eps_);
  } else {
    backend.layernorm_forward(y, saved.mean.view(DType::F32, {n}), saved.rstd.view(DType::F32, {n}), x, weight_, bias_,
                              eps_);
  }
}

void NormLayer::backward(Backend& backend, Tensor dx, GradStore dx_store, Tensor dy, Tensor x,
                         const NormSaved& saved) const {
  const int64_t n = x.shape[0];
  if (kind_ == NormKind::RMSNorm) {
    backend.rmsnorm_backward(dx, dx_store, weight_grad_, dy, x, weight_, saved.rstd.view(DType::F32, {n}));
  } else {
    backend.layernorm_backward(dx, dx_store, weight_grad_, bias_grad_, dy, x, weight_,
                               saved.mean.view(DType::F32, {n}), saved.rstd.view(DType::F32, {n}));
  }
}

}  // namespace zt
