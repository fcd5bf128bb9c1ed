// OptimizerConfig: the optimizer a run uses and its hyper-parameters (DeepSpeed's "optimizer"
// section, translated by train/ds_config; flags override it). optim/optimizer.h builds the
// optimizer from it.
#pragma once
#include <string>

namespace zt {

struct OptimizerConfig {
  // adamw (DeepSpeed "Adam"/"AdamW" both map here, see ds_config) | sgd (torch.optim.SGD) |
  // lamb (DeepSpeed "Lamb": FusedLamb) | lomo (LOMO: SGD fused into backward) | adalomo (AdaLomo:
  // LOMO with a factored second moment) | onebitadam (DeepSpeed "OneBitAdam") |
  // zerooneadam (DeepSpeed "ZeroOneAdam")
  std::string type = "adamw";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // false: DeepSpeed "Adam" with adam_w_mode=false, i.e. L2-regularised Adam. ds_config accepts
  // it only with weight_decay 0, where it is the same update as AdamW; the optimizer must
  // refuse adam_w_mode=false with a non-zero weight_decay (e.g. one set later by --weight-decay).
  bool adam_w_mode = true;
  // SGD (torch.optim.SGD's defaults)
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Lamb (DeepSpeed FusedLamb's defaults); also its betas, eps and weight_decay above
  bool bias_correction = true;   // FusedLamb: the step size lr sqrt(1 - b2^t) / (1 - b1^t)
  bool eps_inside_sqrt = false;  // denominator sqrt(v + eps) instead of sqrt(v) + eps
  double max_coeff = 10.0;       // the trust ratio's clamp
  double min_coeff = 0.01;
  // LOMO (OpenLMLab's lomo_optim.Lomo) and AdaLomo: their lr and weight_decay above, plus
  // gradient value clipping (0: off). Their clip_grad_norm is the run's gradient_clipping.
  double clip_grad_value = 0.0;
  // 1-bit Adam (DeepSpeed OneBitAdam): its lr, betas, eps and weight_decay above; full Adam (no
  // bias correction) for the first freeze_step updates, then the variance frozen and the
  // momentum exchanged as signs. comm_backend_name: "nccl" exchanges through the device
  // communicator with the device's packing kernels, "mpi" through MPI with the packing on the host.
  int64_t freeze_step = 100000;
  std::string comm_backend_name = "nccl";
  // 0/1 Adam (DeepSpeed ZeroOneAdam): its lr, betas, eps, weight_decay and comm_backend_name
  // above. The variance is updated on an exponentially thinning schedule (var_update_scaler
  // updates at each interval, then the interval doubles) until var_freeze_step, the other steps
  // averaging 1-bit compressed gradients; then local steps that synchronise every
  // local_step_interval updates (doubling after local_step_scaler updates, at most
  // local_step_clipper).
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
  // AdaLomo (lomo_optim.AdaLomo's defaults): eps = (eps_square, eps_scale), clip_threshold,
  // decay_rate.
  double eps_square = 1e-30;     // eps[0]: added to g^2 before the second moment
  double eps_scale = 1e-3;       // eps[1]: the least parameter RMS the step size scales lr by
  double clip_threshold = 1.0;   // the update's RMS is clipped to it
  double decay_rate = -0.8;      // the second moment's beta2 at update t: 1 - t^decay_rate
};

}  // namespace zt
