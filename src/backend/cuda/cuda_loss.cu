// The CUDA backend's fused softmax + cross-entropy over the vocabulary, with the gradient
// written over the logits. One block per row: each thread keeps a running (max, sum of exp)
// over its slice of the row (online softmax, one read), the block combines them, then one more
// pass writes the gradient. Per-row losses (double) are summed on the host in row order, as the
// CPU backend sums them. Bad masks or targets are found on the device, reported after the one
// synchronisation the returned loss needs anyway.
#include <vector>

#include "backend/buffer.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

template <class Format>
__global__ void cross_entropy_kernel(typename Format::Storage* logits, const int32_t* targets,
                                     const uint8_t* mask, double* row_loss, int64_t rows,
                                     int64_t vocab, float grad_scale, bool write_grad,
                                     uint64_t* status) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    typename Format::Storage* x = logits + row * vocab;  // x[V]: logits, then the gradient
    const uint8_t flag = mask[row];
    const int32_t target = targets[row];
    if (flag > 1 || (flag == 1 && (target < 0 || target >= vocab))) {
      if (threadIdx.x == 0) {
        atomicMin(reinterpret_cast<unsigned long long*>(status + kFirstBadRow),
                  static_cast<unsigned long long>(row));
      }
      continue;
    }
    if (flag == 0) {
      if (threadIdx.x == 0) row_loss[row] = 0.0;
      if (write_grad) {
        const float zeros[kVector] = {};
        for (int64_t first = threadIdx.x * int64_t{kVector}; first < vocab;
             first += int64_t{blockDim.x} * kVector) {
          store8<Format>(x, first, vocab, zeros);
        }
      }
      continue;
    }
    const float target_logit = Format::to_float(x[target]);  // read before any thread writes
    // Running max and sum of e^(x - max) of this thread's elements. A NaN logit makes the sum
    // (hence the loss) NaN, as on the CPU backend; -inf logits add nothing.
    float thread_max = -INFINITY, thread_sum = 0.0f;
    for (int64_t first = threadIdx.x * int64_t{kVector}; first < vocab;
         first += int64_t{blockDim.x} * kVector) {
      float values[kVector];
      load8<Format>(x, first, vocab, values);
#pragma unroll
      for (int k = 0; k < kVector; ++k) {
        if (first + k >= vocab) break;
        const float value = values[k];
        if (value > thread_max) {
          thread_sum = thread_sum * expf(thread_max - value) + 1.0f;
          thread_max = value;
        } else if (value != -INFINITY) {
          thread_sum += expf(value - thread_max);
        }
      }
    }
    const float row_max = block_max(thread_max, scratch);
    // A thread that saw only -inf (sum 0) or NaN (sum NaN) keeps its sum times 0.
    const float rescaled =
        thread_max == -INFINITY ? thread_sum * 0.0f : thread_sum * expf(thread_max - row_max);
    const float sum = block_sum(rescaled, scratch);  // ends with a barrier: reads are done
    if (threadIdx.x == 0) {
      row_loss[row] = static_cast<double>(row_max) + log(static_cast<double>(sum)) -
                      static_cast<double>(target_logit);
    }
    if (write_grad) {
      // dlogits = (softmax - onehot) * grad_scale
      const float probability_scale = grad_scale / sum;
      for (int64_t first = threadIdx.x * int64_t{kVector}; first < vocab;
           first += int64_t{blockDim.x} * kVector) {
        float values[kVector];
        load8<Format>(x, first, vocab, values);
#pragma unroll
        for (int k = 0; k < kVector; ++k) {
          values[k] = __fmul_rn(expf(values[k] - row_max), probability_scale);
          if (first + k == target) values[k] = __fsub_rn(values[k], grad_scale);
        }
        store8<Format>(x, first, vocab, values);
      }
    }
  }
}

}  // namespace

double CudaBackendImpl::cross_entropy(Tensor logits, Tensor targets, Tensor mask,
                                      float grad_scale) {
  const char* op = "cross_entropy";
  expect_device_float(op, "logits", logits);
  expect_device(op, "targets", targets, DType::I32);
  expect_device(op, "mask", mask, DType::U8);
  const MatrixShape scores = matrix_shape(op, "logits", logits);  // [N, V]
  expect_numel(op, "targets", targets, scores.rows, "one target per row of logits");
  expect_numel(op, "mask", mask, scores.rows, "one flag per row of logits");
  if (scores.rows == 0) return 0.0;
  ZT_CHECK(scores.cols > 0, op, ": logits ", logits.describe(), " has no vocabulary");
  Buffer row_loss(*this, static_cast<size_t>(scores.rows) * sizeof(double));  // row_loss[N]
  reset_first_bad_row();
  dispatch_float(logits.dtype, op, "logits", [&](auto format) {
    using Format = decltype(format);
    cross_entropy_kernel<Format><<<row_grid(scores.rows), kThreads, 0, stream_>>>(
        data_of<Format>(logits), static_cast<const int32_t*>(targets.data),
        static_cast<const uint8_t*>(mask.data), static_cast<double*>(row_loss.data()),
        scores.rows, scores.cols, grad_scale, grad_scale != 0.0f, device_status());
    ZT_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
  });
  std::vector<double> host_loss(static_cast<size_t>(scores.rows));
  download(host_loss.data(), row_loss.data(), row_loss.bytes());
  const uint64_t bad_row = host_status_[kFirstBadRow];  // fresh: download() synchronised
  if (bad_row != UINT64_MAX) {
    uint8_t flag = 0;
    int32_t target = 0;
    download(&flag, static_cast<const uint8_t*>(mask.data) + bad_row, 1);
    download(&target, static_cast<const int32_t*>(targets.data) + bad_row, sizeof(int32_t));
    ZT_CHECK(flag <= 1, op, ": mask[", bad_row, "] = ", int{flag}, " (must be 0 or 1)");
    fail(op, ": targets[", bad_row, "] = ", target, " is outside the vocabulary [0, ",
         scores.cols, ")");
  }
  double total = 0.0;
  for (double loss : host_loss) total += loss;
  return total;
}

}  // namespace zt::cuda
