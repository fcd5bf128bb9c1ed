// OptimizerKernels: the fused per-element kernels of particular optimizers (AdamW, SGD, LAMB,
// 1-bit and 0/1 Adam's sign compression, AdaLomo), apart from Backend's general ops, so that a
// new optimizer's kernel widens this interface and its three implementations
// (backend/cpu/cpu_optimizer_kernels, backend/cuda/cuda_optimizer_kernels,
// backend/counting_optimizer_kernels.h), never Backend itself. A backend hands out its own with
// Backend::optimizer_kernels(); the kernels run on that backend's device and queue, in call
// order with its other ops. Tensors follow backend.h's conventions (row-major, contiguous views);
// every buffer here is fp32 (master weights and optimizer state are always fp32), the sign bits
// uint8. Anything else is a zt::Error naming the op and the argument.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace zt {

// Hyperparameters in double, as torch computes 1 - beta2, lr / (1 - beta1^t), ... from Python
// floats: from float(0.999) instead, 1 - beta2 would be wrong by 1e-5 relative.
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;          // 1-based step count used for bias correction
  bool bias_correction = true;
};

// torch.optim.SGD's hyper-parameters for one update ("sgd" below).
struct SgdParams {
  double lr = 1e-3;
  double momentum = 0.0;      // 0: no momentum buffer (pass an empty tensor)
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2, added to the gradient before the momentum (torch's coupled decay)
  bool nesterov = false;
  bool first_step = true;     // the momentum buffer starts as a copy of the gradient (no dampening)
};

// DeepSpeed FusedLamb's per-element hyper-parameters ("lamb_direction" below).
struct LambParams {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool eps_inside_sqrt = false;  // denominator sqrt(v + eps) instead of sqrt(v) + eps
};

class OptimizerKernels {
 public:
  virtual ~OptimizerKernels() = default;

  // ---- AdamW, SGD, LAMB ---------------------------------------------------------------
  // AdamW on flat fp32 buffers param, grad, exp_avg, exp_avg_sq [n] (PyTorch/DeepSpeed
  // semantics: decoupled weight decay param *= 1 - lr*wd, then the bias-corrected Adam step;
  // its fp32 constants come from backend/adamw_constants.h on every backend).
  virtual void adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                     const AdamWParams& params) = 0;
  // The same with ZeRO-Offload's extra passes fused in (the CPU kernels: one pass over memory,
  // backend/cpu/cpu_adam.h): grad fp32, bf16 or fp16 [n], read as float(grad) * grad_scale;
  // param_out empty or bf16/fp16 [n], which also receives the updated param rounded (RNE). The
  // bits are those of widening, scaling, adamw and rounding one after the other. Only where
  // fuses_adamw_passes() (the CPU kernels, which run the offloaded update); elsewhere an error.
  virtual bool fuses_adamw_passes() const { return false; }
  virtual void adamw_fused(Tensor param, Tensor grad, float grad_scale, Tensor exp_avg, Tensor exp_avg_sq,
                           const AdamWParams& params, Tensor param_out) {
    (void)param, (void)grad, (void)grad_scale, (void)exp_avg, (void)exp_avg_sq, (void)params, (void)param_out;
    fail("adamw_fused: these optimizer kernels do not fuse AdamW's offload passes (fuses_adamw_passes() is false)");
  }
  // SGD on param, grad [n] with momentum_buffer [n] (empty when params.momentum is 0), as
  // torch.optim.SGD: d = g + wd p; buf = first_step ? d : momentum buf + (1 - dampening) d;
  // d = nesterov ? d + momentum buf : buf; p -= lr d.
  virtual void sgd(Tensor param, Tensor grad, Tensor momentum_buffer, const SgdParams& params) = 0;
  // LAMB's per-element pass (DeepSpeed FusedLamb, before its per-tensor trust ratio): the raw
  // moments m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 and the update direction
  // update[n] = m / (sqrt(v) + eps) + wd p (no bias correction inside: FusedLamb applies it to the
  // step size). `update` may alias `grad`.
  virtual void lamb_direction(Tensor update, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                              const LambParams& params) = 0;

  // ---- 1-bit compression (1-bit Adam's error-feedback exchange) ------------------------
  // x, error fp32 [n]; bits uint8 [ceil(n / 8)]. Bit 7 - i % 8 of byte i / 8 is 1 where
  // x[i] >= 0 (DeepSpeed's packbits order: an 8-element group's first element in the top bit;
  // the last byte's unused bits 0), and error = x - scale * sign(x) with sign(0) = +1: the part
  // of x that the signs times `scale` do not carry, fed back into the next compression.
  virtual void pack_signs(Tensor bits, Tensor error, Tensor x, float scale) = 0;
  // out [n] += scale * sign (bit 1: +1, bit 0: -1), fp32; bits as pack_signs writes them.
  virtual void add_signs(Tensor out, Tensor bits, float scale) = 0;
  // 0/1 Adam's synchronisation: x[n] *= sqrt(exp_avg_sq[n]) + eps, or /= it when `divide` (Adam's
  // denominator, eps outside the root), fp32.
  virtual void adam_denominator_scale(Tensor x, Tensor exp_avg_sq, float eps, bool divide) = 0;

  // ---- AdaLomo ------------------------------------------------------------------------
  // AdaLomo's factored second moment (OpenLMLab lomo_optim.AdaLomo, Adafactor's factorisation)
  // over the slice of one parameter tensor that a rank holds. The tensor is [R, C] row-major (a
  // vector of d elements is [d, 1], and has no column state: col_sums and col are empty); grad[n]
  // holds its elements [offset, offset + n), rows possibly cut at both ends.
  // adalomo_square_sums WRITES row_sums[R] and col_sums[C]: the sums of g^2 + eps over the slice's
  // elements of each row and column (0 where the slice has none), so that the ranks' sums add up
  // to the whole tensor's.
  virtual void adalomo_square_sums(Tensor row_sums, Tensor col_sums, Tensor grad, int64_t offset, float eps) = 0;
  // With the whole tensor's sums: row = beta2t row + (1 - beta2t) row_sums / C,
  // col = beta2t col + (1 - beta2t) col_sums / R (the means of g^2 + eps); returns mean(row)
  // after the update, accumulated in double (the host waits for the device: a synchronisation).
  virtual double adalomo_moments(Tensor row, Tensor col, Tensor row_sums, Tensor col_sums, float beta2t) = 0;
  // update[n] = (rsqrt(row[r] / row_mean) rsqrt(col[c])) g for the slice's element (r, c) of a
  // matrix; rsqrt(row[offset + i]) g[i] for a vector. `update` may alias `grad`.
  virtual void adalomo_direction(Tensor update, Tensor grad, Tensor row, Tensor col, int64_t offset,
                                 float row_mean) = 0;
};

}  // namespace zt
