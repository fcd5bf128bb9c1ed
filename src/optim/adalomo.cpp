// AdaLomo on the optimizer seam: per piece, two collectives (the tensors' row/column sums of
// g^2 + eps, then the tensors' squares of u and W), the state update on every tensor of the piece
// and the update of this rank's slices.
#include "optim/adalomo.h"

#include <algorithm>
#include <cmath>

#include "backend/buffer.h"
#include "core/error.h"
#include "optim/lomo.h"

namespace zt {

namespace {

// A tensor seen as [rows, cols]: a vector of d elements is [d, 1], with no column state.
struct Factored {
  int64_t rows = 0, cols = 1;
  bool matrix = false;
};

Factored factored(std::span<const int64_t> shape) {
  ZT_CHECK(shape.size() == 1 || shape.size() == 2, "optimizer AdaLomo factors matrices and vectors; a parameter "
           "tensor has ", shape.size(), " dimensions");
  Factored f;
  f.rows = shape[0];
  f.matrix = shape.size() == 2;
  f.cols = f.matrix ? shape[1] : 1;
  return f;
}

class AdaLomo final : public Optimizer {
 public:
  explicit AdaLomo(const OptimizerConfig& config) : config_(config) {
    const auto check = [](bool ok, const char* key, double value, const char* rule) {
      ZT_CHECK(ok, "optimizer AdaLomo: ", key, " ", value, " must be ", rule);
    };
    check(config.lr >= 0.0, "lr", config.lr, ">= 0");
    check(config.weight_decay >= 0.0, "weight_decay", config.weight_decay, ">= 0");
    check(config.clip_grad_value >= 0.0, "clip_grad_value", config.clip_grad_value, ">= 0 (0: off)");
    check(config.eps_square >= 0.0, "eps[0]", config.eps_square, ">= 0");
    check(config.eps_scale >= 0.0, "eps[1]", config.eps_scale, ">= 0");
    check(config.clip_threshold > 0.0, "clip_threshold", config.clip_threshold, "> 0");
    check(config.decay_rate <= 0.0, "decay_rate", config.decay_rate, "<= 0 (beta2 = 1 - t^decay_rate)");
  }
  std::string name() const override { return "adalomo"; }
  std::vector<std::string> state_names() const override { return {}; }
  std::vector<TensorStateSpec> tensor_state(std::span<const int64_t> shape) const override {
    const Factored f = factored(shape);
    if (!f.matrix) return {{"exp_avg_sq", f.rows}};
    return {{"exp_avg_sq_row", f.rows}, {"exp_avg_sq_col", f.cols}};
  }
  bool needs_tensor_slices() const override { return true; }
  bool fuses_into_backward() const override { return true; }
  double flops_per_element() const override { return 14.0; }

  void update(Backend& backend, OptimizerPiece& piece, const OptimizerStep& step) const override {
    clamp_gradient_values(backend, piece.grad, config_.clip_grad_value, step);
    const size_t count = piece.tensors.size();
    // Where each tensor's row and column sums sit in one buffer (one collective for the piece).
    std::vector<int64_t> at(count + 1, 0);
    for (size_t k = 0; k < count; ++k) {
      const Factored f = factored(piece.tensors[k].shape);
      at[k + 1] = at[k] + f.rows + (f.matrix ? f.cols : 0);
    }
    if (at[count] == 0) return;
    Buffer sums_buffer(backend, static_cast<size_t>(at[count]) * sizeof(float));
    const Tensor sums = sums_buffer.view(DType::F32, {at[count]});  // fp32 [sum of R + C]
    const auto row_sums = [&](size_t k) { return sums.rows(at[k], factored(piece.tensors[k].shape).rows); };
    const auto col_sums = [&](size_t k) {
      const Factored f = factored(piece.tensors[k].shape);
      return f.matrix ? sums.rows(at[k] + f.rows, f.cols) : Tensor();
    };
    const auto grad_of = [&](const TensorSlice& slice) { return piece.grad.rows(slice.begin, slice.numel); };
    const auto param_of = [&](const TensorSlice& slice) { return piece.param.rows(slice.begin, slice.numel); };
    const auto col_state = [&](const TensorSlice& slice) { return slice.state.size() > 1 ? slice.state[1] : Tensor(); };

    OptimizerKernels& kernels = backend.optimizer_kernels();
    // 1. This rank's row and column sums of g^2 + eps[0], added over the ranks.
    for (size_t k = 0; k < count; ++k)
      kernels.adalomo_square_sums(row_sums(k), col_sums(k), grad_of(piece.tensors[k]), piece.tensors[k].offset,
                                  static_cast<float>(config_.eps_square));
    piece.sum_tensor_over_ranks(sums);

    // 2. Every rank updates every tensor's state alike, then the directions of its own slices.
    // lomo_optim increments its step before updating: the first update has t = 1 (beta2t = 0).
    const float beta2t = static_cast<float>(1.0 - std::pow(static_cast<double>(step.update_number), config_.decay_rate));
    std::vector<double> squares(2 * count, 0.0);  // [2 K]: (sum u^2, sum W^2) of each tensor's slice
    for (size_t k = 0; k < count; ++k) {
      const TensorSlice& slice = piece.tensors[k];
      const double row_mean = kernels.adalomo_moments(slice.state[0], col_state(slice), row_sums(k), col_sums(k), beta2t);
      if (!slice.numel) continue;
      Tensor update = grad_of(slice);  // u overwrites the gradient, which is not needed after this
      kernels.adalomo_direction(update, grad_of(slice), slice.state[0], col_state(slice), slice.offset,
                                static_cast<float>(row_mean));
      squares[2 * k] = backend.sum_squares(update);
      squares[2 * k + 1] = backend.sum_squares(param_of(slice));
    }
    piece.sum_over_ranks(squares);

    // 3. W = W (1 - lr_t wd) - (lr_t / max(1, RMS(u) / clip_threshold)) u on this rank's slices.
    const double weight_decay = piece.decay ? config_.weight_decay : 0.0;
    for (size_t k = 0; k < count; ++k) {
      const TensorSlice& slice = piece.tensors[k];
      if (!slice.numel) continue;
      const Factored f = factored(slice.shape);
      const double numel = static_cast<double>(f.rows * f.cols);
      const double update_rms = std::sqrt(squares[2 * k] / numel), param_rms = std::sqrt(squares[2 * k + 1] / numel);
      const double divisor = std::max(1.0, update_rms / config_.clip_threshold);
      const double lr = step.lr * std::max(config_.eps_scale, param_rms);
      if (weight_decay > 0.0) backend.scale(param_of(slice), static_cast<float>(1.0 - lr * weight_decay));
      backend.accumulate(param_of(slice), grad_of(slice), static_cast<float>(-lr / divisor));
    }
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adalomo(const OptimizerConfig& config) { return std::make_unique<AdaLomo>(config); }

}  // namespace zt
