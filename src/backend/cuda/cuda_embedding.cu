// The CUDA backend's embedding lookup and its deterministic backward. Backward without float
// atomics and without sorting: the first occurrence of each id in the batch owns that table
// row; its block gathers the id's later occurrences in increasing position order and adds
// their gradients, so repeated ids add up in the CPU backend's order (bit-identical in fp32).
// Ids outside [0, V) are found on the device and reported at the backend's next synchronisation
// (a deferred error, as cross-entropy's): checking them here would stall the GPU twice per
// micro-batch.
#include "backend/buffer.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

namespace {

__device__ inline bool valid_id(int32_t id, int64_t vocab) { return id >= 0 && id < vocab; }

// Records a bad id for the next synchronisation to report (any one of them, and the vocabulary).
__device__ inline void report_bad_id(uint64_t* status, DeferredError error, int32_t id, int64_t vocab) {
  atomicExch(reinterpret_cast<unsigned long long*>(status + kBadEmbeddingId),
             static_cast<unsigned long long>(static_cast<uint32_t>(id)));
  atomicExch(reinterpret_cast<unsigned long long*>(status + kEmbeddingVocab), static_cast<unsigned long long>(vocab));
  atomicOr(reinterpret_cast<unsigned long long*>(status + kDeferredErrors), static_cast<unsigned long long>(error));
}

// out[n, :] = table[ids[n], :], one block per row (grid-stride over rows).
template <class Format>
__global__ void embedding_forward_kernel(typename Format::Storage* out,
                                         const typename Format::Storage* table,
                                         const int32_t* ids, int64_t rows, int64_t cols,
                                         int64_t vocab, uint64_t* status) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int32_t id = ids[row];
    if (!valid_id(id, vocab)) {
      if (threadIdx.x == 0) report_bad_id(status, kEmbeddingForwardBadId, id, vocab);
      continue;
    }
    const typename Format::Storage* source = table + id * cols;  // source[C]
    typename Format::Storage* target = out + row * cols;         // target[C]
    for (int64_t first = threadIdx.x * int64_t{kVector}; first < cols;
         first += int64_t{blockDim.x} * kVector) {
      float values[kVector];
      load8<Format>(source, first, cols, values);
      store8<Format>(target, first, cols, values);
    }
  }
}

// "No occurrence yet" in first_position: every byte 0x7F (cudaMemset), above any row index.
constexpr int32_t kNoPosition = 0x7F7F7F7F;

// first_position[v] = smallest n with ids[n] == v (first_position pre-filled with kNoPosition).
// Integer atomicMin: the result does not depend on the order the threads run in.
__global__ void first_position_kernel(int32_t* first_position, const int32_t* ids, int64_t rows,
                                      int64_t vocab, uint64_t* status) {
  for (int64_t row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; row < rows;
       row += int64_t{gridDim.x} * blockDim.x) {
    const int32_t id = ids[row];
    if (valid_id(id, vocab)) {
      atomicMin(first_position + id, static_cast<int32_t>(row));
    } else {
      report_bad_id(status, kEmbeddingBackwardBadId, id, vocab);
    }
  }
}

// For each row n that is the first occurrence of its id v: dtable[v, :] += dout[m, :] for every
// m >= n with ids[m] == v, in increasing m. The block scans ids[n:] kThreads at a time, packs
// the matches in order into shared memory (ballot + prefix over warps), then adds them.
template <class Format>
__global__ void embedding_backward_kernel(FloatArg dtable, const typename Format::Storage* dout,
                                          const int32_t* ids, const int32_t* first_position,
                                          int64_t rows, int64_t cols, int64_t vocab) {
  ZT_SHARED(int32_t, matches, [kThreads]);     // matches[count]: rows of this id, increasing
  ZT_SHARED(int32_t, warp_counts, [kThreads / 32]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int32_t id = ids[row];
    if (!valid_id(id, vocab) || first_position[id] != row) continue;  // not the owner
    for (int64_t base = row; base < rows; base += kThreads) {
      const int64_t candidate = base + threadIdx.x;
      const bool match = candidate < rows && ids[candidate] == id;
      const unsigned int ballot = __ballot_sync(0xFFFFFFFFu, match);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int offset = 0, count = 0;
      for (int w = 0; w < kThreads / 32; ++w) {
        if (w < warp) offset += warp_counts[w];
        count += warp_counts[w];
      }
      if (match) matches[offset + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int32_t>(candidate);
      __syncthreads();
      if (count > 0) {
        for (int64_t col = threadIdx.x; col < cols; col += kThreads) {
          float sum = dtable.load(id * cols + col);
          for (int j = 0; j < count; ++j) sum += Format::to_float(dout[matches[j] * cols + col]);
          dtable.store(id * cols + col, sum);
        }
      }
      __syncthreads();  // matches and warp_counts are rewritten by the next scan step
    }
  }
}

}  // namespace

void CudaBackendImpl::embedding_forward(Tensor out, Tensor table, Tensor ids) {
  const char* op = "embedding_forward";
  expect_device_float(op, "out", out);
  expect_device(op, "table", table);
  expect_same_dtype(op, "table", table, "out", out);
  expect_device(op, "ids", ids, DType::I32);
  const EmbeddingDims dims = embedding_dims(op, "out", out, "table", table, ids);
  if (dims.rows == 0 || dims.cols == 0) return;
  dispatch_float(out.dtype, op, "out", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(dims.rows), kThreads, 0, stream_}, embedding_forward_kernel<Format>,
        static_cast<typename Format::Storage*>(out.data),
        static_cast<const typename Format::Storage*>(table.data),
        static_cast<const int32_t*>(ids.data), dims.rows, dims.cols, dims.vocab,
        device_status());
    ZT_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
  });
}

void CudaBackendImpl::embedding_backward(Tensor dtable, Tensor dout, Tensor ids) {
  if (dtable.empty()) return;  // frozen table
  const char* op = "embedding_backward";
  expect_device_float(op, "dtable", dtable);
  expect_device_float(op, "dout", dout);
  expect_device(op, "ids", ids, DType::I32);
  const EmbeddingDims dims = embedding_dims(op, "dout", dout, "dtable", dtable, ids);
  ZT_CHECK(dims.rows < kNoPosition, op, ": ", dims.rows, " rows exceed the int32 positions");
  if (dims.rows == 0 || dims.cols == 0) return;
  const int64_t vocab = dims.vocab;
  Buffer first_position = scratch(static_cast<size_t>(vocab) * sizeof(int32_t));  // [V]
  ZT_CUDA_CHECK(cudaMemsetAsync(first_position.data(), 0x7F, first_position.bytes(), stream_));
  const int32_t* id_data = static_cast<const int32_t*>(ids.data);
  launch({grid_for(dims.rows), kThreads, 0, stream_}, first_position_kernel,
      static_cast<int32_t*>(first_position.data()), id_data, dims.rows, vocab,
      device_status());
  ZT_CUDA_CHECK_LAUNCH("first_position_kernel");
  dispatch_float(dout.dtype, op, "dout", [&](auto format) {
    using Format = decltype(format);
    launch({row_grid(dims.rows), kThreads, 0, stream_}, embedding_backward_kernel<Format>,
        float_arg(dtable), static_cast<const typename Format::Storage*>(dout.data), id_data,
        static_cast<const int32_t*>(first_position.data()), dims.rows, dims.cols, vocab);
    ZT_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
  });
}

}  // namespace zt::cuda
