// The CUDA backend's optimizer kernels (backend/optimizer_kernels.h), in
// cuda_optimizer_kernels.cu: one fused kernel per op on the backend's stream, rounding each
// operation as the CPU kernels do. CudaBackendImpl holds one (optimizer_kernels()); it borrows
// the backend's stream, allocator and downloads, so it lives inside the backend it was made for.
#pragma once
#include <cstdint>

#include "backend/optimizer_kernels.h"

namespace zt::cuda {

class CudaBackendImpl;

class CudaOptimizerKernels final : public OptimizerKernels {
 public:
  explicit CudaOptimizerKernels(CudaBackendImpl& backend) : backend_(backend) {}

  void adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, const AdamWParams& params) override;
  void sgd(Tensor param, Tensor grad, Tensor momentum_buffer, const SgdParams& params) override;
  void lamb_direction(Tensor update, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                      const LambParams& params) override;
  void pack_signs(Tensor bits, Tensor error, Tensor x, float scale) override;
  void add_signs(Tensor out, Tensor bits, float scale) override;
  void adam_denominator_scale(Tensor x, Tensor exp_avg_sq, float eps, bool divide) override;
  void adalomo_square_sums(Tensor row_sums, Tensor col_sums, Tensor grad, int64_t offset, float eps) override;
  double adalomo_moments(Tensor row, Tensor col, Tensor row_sums, Tensor col_sums, float beta2t) override;
  void adalomo_direction(Tensor update, Tensor grad, Tensor row, Tensor col, int64_t offset, float row_mean) override;

 private:
  CudaBackendImpl& backend_;
};

}  // namespace zt::cuda
