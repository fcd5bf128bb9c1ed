// The counting backend's optimizer kernels (backend/optimizer_kernels.h): they compute nothing,
// as every op of the counting backend (counting_backend.h); adalomo_moments returns 0. What they
// mirror of the CUDA backend is its synchronisations: adalomo_moments waits for the device (it
// downloads the row mean), so the held extents of `pool` become reusable there too.
#pragma once
#include <cstdint>

#include "backend/optimizer_kernels.h"
#include "backend/physical_pool.h"

namespace zt {

class CountingOptimizerKernels final : public OptimizerKernels {
 public:
  explicit CountingOptimizerKernels(PhysicalPool& pool) : pool_(pool) {}

  void adamw(Tensor, Tensor, Tensor, Tensor, const AdamWParams&) override {}
  void sgd(Tensor, Tensor, Tensor, const SgdParams&) override {}
  void lamb_direction(Tensor, Tensor, Tensor, Tensor, Tensor, const LambParams&) override {}
  void pack_signs(Tensor, Tensor, Tensor, float) override {}
  void add_signs(Tensor, Tensor, float) override {}
  void adam_denominator_scale(Tensor, Tensor, float, bool) override {}
  void adalomo_square_sums(Tensor, Tensor, Tensor, int64_t, float) override {}
  double adalomo_moments(Tensor, Tensor, Tensor, Tensor, float) override {
    pool_.synchronized();
    return 0.0;
  }
  void adalomo_direction(Tensor, Tensor, Tensor, Tensor, int64_t, float) override {}

 private:
  PhysicalPool& pool_;  // the counting backend's, which outlives this object
};

}  // namespace zt
