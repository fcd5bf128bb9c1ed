// The CPU backend's fused softmax + cross-entropy over the vocabulary, with the gradient
// written over the logits. One row (token) per iteration; a row of logits (V floats, 128 KB for
// V = 32000) stays in L2 between the passes, so memory sees about one read and one write.
// bf16/fp16 logits go through Fp32Staging: the loss comes from the widened logits and dlogits
// are rounded once to the logits' dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_vector_math.h"

namespace zt::cpu {

double CpuBackend::cross_entropy(Tensor logits, Tensor targets, Tensor mask, float grad_scale) {
  const char* op = "cross_entropy";
  const bool write_grad = grad_scale != 0.0f;
  Fp32Staging stage(op);
  const Matrix scores = f32_matrix(op, "logits", write_grad ? stage.update("logits", logits)
                                                            : stage.read("logits", logits));  // [N, V]
  const int32_t* target_data = i32_arg(op, "targets", targets);
  const uint8_t* mask_data = u8_arg(op, "mask", mask);
  expect_numel(op, "targets", targets, scores.rows, "one target per row of logits");
  expect_numel(op, "mask", mask, scores.rows, "one flag per row of logits");
  const int64_t rows = scores.rows, vocab = scores.cols;
  // Checked up front: the parallel loop below cannot throw.
  for (int64_t row = 0; row < rows; ++row) {
    ZT_CHECK(mask_data[row] <= 1, op, ": mask[", row, "] = ", int{mask_data[row]},
             " (must be 0 or 1)");
    ZT_CHECK(!mask_data[row] || (target_data[row] >= 0 && target_data[row] < vocab), op,
             ": targets[", row, "] = ", target_data[row], " is outside the vocabulary [0, ", vocab,
             ")");
  }
  // Per-row losses, summed in row order at the end: the total does not depend on threads.
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);  // row_loss[N]
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t row = 0; row < rows; ++row) {
    float* x = scores.data + row * vocab;  // x[V]: logits of this row, then its gradient
    if (!mask_data[row]) {
      if (write_grad) {
#pragma omp simd
        for (int64_t j = 0; j < vocab; ++j) x[j] = 0.0f;
      }
      continue;
    }
    const int64_t target = target_data[row];
    const float target_logit = x[target];
    float row_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : row_max)
    for (int64_t j = 0; j < vocab; ++j) row_max = std::max(row_max, x[j]);
    // A NaN logit is skipped by the max but makes the sum, hence the loss, NaN.
    float sum = 0.0f;
    if (write_grad) {
      // Keep e^(x - max) in place; the gradient pass then only rescales it.
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < vocab; ++j) {
        x[j] = vector_exp(x[j] - row_max);
        sum += x[j];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < vocab; ++j) sum += vector_exp(x[j] - row_max);
    }
    const double log_sum = std::log(static_cast<double>(sum));
    row_loss[static_cast<size_t>(row)] =
        static_cast<double>(row_max) + log_sum - static_cast<double>(target_logit);
    if (write_grad) {
      // dlogits = (softmax - onehot) * grad_scale
      const float probability_scale = grad_scale / sum;
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) x[j] *= probability_scale;
      x[target] -= grad_scale;
    }
  }
  stage.write_back();
  double total = 0.0;
  for (double loss : row_loss) total += loss;
  return total;
}

}  // namespace zt::cpu
