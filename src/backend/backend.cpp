// Default implementations of Backend operations that other operations can express.
#include "backend/backend.h"

#include <algorithm>

#include "backend/buffer.h"

namespace zt {

void Backend::matmul_bias(Tensor c, Tensor a, Tensor b, Tensor bias) {
  matmul(c, a, false, b, true, 1.0f, 0.0f);
  if (!bias.empty()) add_bias(c, bias);
}

std::unique_ptr<Backend> Backend::make_host_backend() { return make_cpu_backend(); }
std::unique_ptr<Backend> Backend::make_pageable_host_backend() { return make_cpu_backend(); }

void Backend::cross_entropy_accumulate(Tensor logits, Tensor targets, Tensor mask, float grad_scale, Tensor loss_sum) {
  ZT_CHECK(loss_sum.dtype == DType::F64 && loss_sum.numel() == 1, "cross_entropy_accumulate: loss_sum must be fp64 [1], got ",
           loss_sum.describe());
  const double sum = cross_entropy(logits, targets, mask, grad_scale);
  double total = 0.0;  // [1]
  Tensor host(&total, DType::F64, {1});
  copy(host, loss_sum);
  total += sum;
  copy(loss_sum, host);
}

namespace {
struct CompletedEvent final : BackendEvent {
  void wait() override {}
};
}  // namespace

std::unique_ptr<BackendEvent> Backend::record_event() { return std::make_unique<CompletedEvent>(); }

std::unique_ptr<BackendEvent> Backend::transfer_async(Tensor dst, Tensor src) {
  copy(dst, src);  // everything before it has completed: this backend is synchronous
  return std::make_unique<CompletedEvent>();
}

double Backend::sum_squares_of(std::span<const Tensor> xs) {
  double sum = 0.0;
  for (const Tensor& x : xs) sum += sum_squares(x);
  return sum;
}

bool Backend::has_inf_or_nan_in(std::span<const Tensor> xs) {
  for (const Tensor& x : xs)
    if (has_inf_or_nan(x)) return true;
  return false;
}

}  // namespace zt
