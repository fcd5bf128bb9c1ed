// The CPU backend's optimizer kernels (backend/optimizer_kernels.h): OpenMP loops over host fp32
// arrays, and for AdamW the SIMD kernel cpu_adamw (cpu_adam.h). Stateless: CpuBackend holds one
// and hands it out from optimizer_kernels(); ZeRO-Offload runs them on its host partitions.
#pragma once
#include <cstdint>

#include "backend/optimizer_kernels.h"

namespace zt::cpu {

class CpuOptimizerKernels final : public OptimizerKernels {
 public:
  void adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, const AdamWParams& params) override;
  bool fuses_adamw_passes() const override { return true; }
  void adamw_fused(Tensor param, Tensor grad, float grad_scale, Tensor exp_avg, Tensor exp_avg_sq,
                   const AdamWParams& params, Tensor param_out) override;
  void sgd(Tensor param, Tensor grad, Tensor momentum_buffer, const SgdParams& params) override;
  void lamb_direction(Tensor update, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                      const LambParams& params) override;
  void pack_signs(Tensor bits, Tensor error, Tensor x, float scale) override;
  void add_signs(Tensor out, Tensor bits, float scale) override;
  void adam_denominator_scale(Tensor x, Tensor exp_avg_sq, float eps, bool divide) override;
  void adalomo_square_sums(Tensor row_sums, Tensor col_sums, Tensor grad, int64_t offset, float eps) override;
  double adalomo_moments(Tensor row, Tensor col, Tensor row_sums, Tensor col_sums, float beta2t) override;
  void adalomo_direction(Tensor update, Tensor grad, Tensor row, Tensor col, int64_t offset, float row_mean) override;
};

}  // namespace zt::cpu
