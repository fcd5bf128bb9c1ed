// The CUDA backend's fused softmax + cross-entropy over the vocabulary, with the gradient
// written over the logits. One block per row: each thread keeps a running (max, sum of exp)
// over its slice of the row (online softmax, one read), the block combines them, then one more
// pass writes the gradient. Per-row losses (double) are then summed on the device by one warp
// in row order from 0.0, as the CPU backend sums them on the host. cross_entropy and
// cross_entropy_accumulate queue the same two kernels (queue_cross_entropy): the first reads
// the sum back (one synchronisation) and reports bad masks/targets right away, the second adds
// it to a device accumulator and leaves bad rows to the deferred-error word (reported at the
// next synchronisation), so their sums are the same bits by construction.
#include <cuda_runtime.h>

#include "backend/buffer.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

// Where the loss kernel reports a row whose mask flag is not 0/1 or whose masked target is
// outside [0, V): the least such row in status word kFirstBadRow (the caller synchronises and
// names it), or a DeferredError bit (the next synchronisation throws).
enum class BadRowReport : int { kFirstBadRow, kDeferred };

// Runs body(first, values) for each 8-element vector of the row x[vocab] that this thread of the
// row's block handles (vectors threadIdx.x, threadIdx.x + blockDim.x, ...), its values loaded
// as fp32 (past the row's end: unspecified).
template <class Format, class Body>
__device__ inline void for_each_loaded_vector(const typename Format::Storage* x, int64_t vocab, Body body) {
  for (int64_t first = threadIdx.x * int64_t{kVector}; first < vocab; first += int64_t{blockDim.x} * kVector) {
    float values[kVector];
    load8<Format>(x, first, vocab, values);
    body(first, values);
  }
}

template <class Format>
__global__ void cross_entropy_kernel(typename Format::Storage* logits, const int32_t* targets,
                                     const uint8_t* mask, double* row_loss, int64_t rows,
                                     int64_t vocab, float grad_scale, bool write_grad,
                                     uint64_t* status, BadRowReport report) {
  ZT_SHARED(float, scratch, [32]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    typename Format::Storage* x = logits + row * vocab;  // x[V]: logits, then the gradient
    const uint8_t flag = mask[row];
    const int32_t target = targets[row];
    if (flag > 1 || (flag == 1 && (target < 0 || target >= vocab))) {
      if (threadIdx.x == 0) {
        // NaN, so that a sum read before the error is reported cannot pass for a loss.
        row_loss[row] = static_cast<double>(NAN);
        if (report == BadRowReport::kFirstBadRow) {
          atomicMin(reinterpret_cast<unsigned long long*>(status + kFirstBadRow),
                    static_cast<unsigned long long>(row));
        } else {
          atomicOr(reinterpret_cast<unsigned long long*>(status + kDeferredErrors),
                   static_cast<unsigned long long>(flag > 1 ? kCrossEntropyBadMask
                                                            : kCrossEntropyBadTarget));
        }
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
    for_each_loaded_vector<Format>(x, vocab, [&](int64_t first, float (&values)[kVector]) {
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
    });
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
      for_each_loaded_vector<Format>(x, vocab, [&](int64_t first, float (&values)[kVector]) {
#pragma unroll
        for (int k = 0; k < kVector; ++k) {
          values[k] = __fmul_rn(expf(values[k] - row_max), probability_scale);
          if (first + k == target) values[k] = __fsub_rn(values[k], grad_scale);
        }
        store8<Format>(x, first, vocab, values);
      });
    }
  }
}

constexpr int kWarp = 32;

// loss_sum[0] += (((0.0 + row_loss[0]) + row_loss[1]) + ...) + row_loss[rows - 1]: the rows'
// sum in row order, the order the CPU backend (and this backend, before it summed on the
// device) adds them in. A fixed order makes the sum deterministic and the same bits for both
// loss ops; a tree reduction would be faster but would change cross_entropy's sum. One warp of
// kWarp threads: each pass loads kWarp rows with one coalesced read, then every lane adds the
// kWarp values in order, broadcast by shuffles (all lanes hold the same running total). The
// next pass's values are loaded before this pass's adds, so the load latency hides behind
// them; the chain of dependent fp64 adds (a few cycles each) is the cost, ~0.1 ms per 16k rows.
__global__ void add_rows_in_order_kernel(const double* row_loss, int64_t rows, double* loss_sum) {
  const int lane = static_cast<int>(threadIdx.x);
  double total = 0.0;
  double next = lane < rows ? row_loss[lane] : 0.0;  // this pass's value of row first + lane
  for (int64_t first = 0; first < rows; first += kWarp) {
    const double current = next;
    const int64_t ahead = first + kWarp + lane;
    next = ahead < rows ? row_loss[ahead] : 0.0;
    const int count = rows - first < kWarp ? static_cast<int>(rows - first) : kWarp;
    for (int k = 0; k < count; ++k) total += __shfl_sync(0xffffffffu, current, k);
  }
  if (lane == 0) loss_sum[0] += total;
}

// The checks both loss ops make on logits[N, V], targets int32[N] and mask uint8[N] (every
// message names `op`); returns [N, V].
MatrixShape check_loss_arguments(const char* op, const Tensor& logits, const Tensor& targets,
                                 const Tensor& mask) {
  expect_device_float(op, "logits", logits);
  expect_device(op, "targets", targets, DType::I32);
  expect_device(op, "mask", mask, DType::U8);
  const MatrixShape scores = matrix_shape(op, "logits", logits);  // [N, V]
  expect_numel(op, "targets", targets, scores.rows, "one target per row of logits");
  expect_numel(op, "mask", mask, scores.rows, "one flag per row of logits");
  ZT_CHECK(scores.rows == 0 || scores.cols > 0, op, ": logits ", logits.describe(),
           " has no vocabulary");
  return scores;
}

// Queues the loss kernel (per-row losses into a scratch row_loss[N], dlogits over the logits
// when grad_scale != 0) and loss_sum[0] += the rows' sum in row order. Arguments checked by the
// caller; N > 0. loss_sum: fp64 [1] on the backend's GPU.
void queue_cross_entropy(CudaBackendImpl& backend, const char* op, const MatrixShape& scores,
                         Tensor logits, Tensor targets, Tensor mask, float grad_scale,
                         double* loss_sum, BadRowReport report) {
  Buffer row_loss = backend.scratch(static_cast<size_t>(scores.rows) * sizeof(double));  // row_loss[N]
  double* row_losses = static_cast<double*>(row_loss.data());
  dispatch_float(logits.dtype, op, "logits", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(scores.rows), row_threads(scores.cols), 0, backend.stream()}, cross_entropy_kernel<Format>,
        data_of<Format>(logits), static_cast<const int32_t*>(targets.data),
        static_cast<const uint8_t*>(mask.data), row_losses, scores.rows, scores.cols, grad_scale,
        grad_scale != 0.0f, backend.device_status(), report);
    ZT_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
  });
  launch({1, kWarp, 0, backend.stream()}, add_rows_in_order_kernel, row_losses, scores.rows, loss_sum);
  ZT_CUDA_CHECK_LAUNCH("add_rows_in_order_kernel");
  // row_loss goes back to the allocator here, its kernels still queued: the next user of the
  // block queues its work on the same stream, behind them.
}

// Throws unless `tensor` is memory the driver knows as device memory of GPU `device` (the
// Device::CUDA tag says neither which GPU nor that the pointer is device memory). One lookup in
// the driver's tables, no synchronisation.
void expect_memory_of_gpu(const char* op, const char* arg, const Tensor& tensor, int device) {
  cudaPointerAttributes attributes{};
  ZT_CUDA_CHECK(cudaPointerGetAttributes(&attributes, tensor.data));
  ZT_CHECK(attributes.type == cudaMemoryTypeDevice && attributes.device == device, op, ": ", arg,
           " ", tensor.describe(), " must be device memory of this backend's GPU ", device,
           " (cudaPointerGetAttributes: cudaMemoryType ", static_cast<int>(attributes.type),
           ", device ", attributes.device, ")");
}

}  // namespace

double CudaBackendImpl::cross_entropy(Tensor logits, Tensor targets, Tensor mask,
                                      float grad_scale) {
  const char* op = "cross_entropy";
  const MatrixShape scores = check_loss_arguments(op, logits, targets, mask);  // [N, V]
  if (scores.rows == 0) return 0.0;
  Buffer total = scratch(sizeof(double));  // total[1]: the rows' sum, added to 0.0
  ZT_CUDA_CHECK(cudaMemsetAsync(total.data(), 0, sizeof(double), stream_));  // all bits 0: +0.0
  reset_first_bad_row();
  queue_cross_entropy(*this, op, scores, logits, targets, mask, grad_scale,
                      static_cast<double*>(total.data()), BadRowReport::kFirstBadRow);
  double sum = 0.0;
  download(&sum, total.data(), sizeof(double));
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
  return sum;
}

void CudaBackendImpl::cross_entropy_accumulate(Tensor logits, Tensor targets, Tensor mask,
                                               float grad_scale, Tensor loss_sum) {
  const char* op = "cross_entropy_accumulate";
  const MatrixShape scores = check_loss_arguments(op, logits, targets, mask);  // [N, V]
  expect_device(op, "loss_sum", loss_sum, DType::F64);
  expect_numel(op, "loss_sum", loss_sum, 1, "one fp64 accumulator");
  expect_memory_of_gpu(op, "loss_sum", loss_sum, device_);
  if (scores.rows == 0) return;
  queue_cross_entropy(*this, op, scores, logits, targets, mask, grad_scale,
                      static_cast<double*>(loss_sum.data), BadRowReport::kDeferred);
}

}  // namespace zt::cuda
