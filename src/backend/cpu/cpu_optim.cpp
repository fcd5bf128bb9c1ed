// The CPU backend's AdamW op: argument checks, then the fused SIMD/OpenMP update cpu_adamw
// (optim/cpu_adam.h), which follows torch.optim.AdamW's operation order (single-tensor path)
// and is also what ZeRO-Offload runs on its host partitions.
#include "backend/cpu/cpu_backend.h"
#include "optim/cpu_adam.h"

namespace zt::cpu {

void CpuBackend::adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                       const AdamWParams& params) {
  const char* op = "adamw";
  float* p = f32_arg(op, "param", param);
  const float* g = f32_arg(op, "grad", grad);
  float* m = f32_arg(op, "exp_avg", exp_avg);
  float* v = f32_arg(op, "exp_avg_sq", exp_avg_sq);
  const int64_t n = param.numel();
  expect_numel(op, "grad", grad, n, "the elements of param");
  expect_numel(op, "exp_avg", exp_avg, n, "the elements of param");
  expect_numel(op, "exp_avg_sq", exp_avg_sq, n, "the elements of param");
  ZT_CHECK(params.step >= 1, op, ": step = ", params.step, " (steps count from 1)");
  cpu_adamw(p, g, m, v, n, params);
}

}  // namespace zt::cpu
