// Deterministic column sums for parameter gradients (bias, norm weights): dst[c] += sum over
// rows n of term(n, c), without float atomics. Pass 1: the rows are cut into fixed chunks (a
// function of the row count only), each block sums a 32-column strip of one chunk in a fixed
// order; pass 2: one thread per column adds the chunk sums in chunk order. Same inputs, same
// bits, on every run.
#pragma once
#include "backend/buffer.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.cuh"

namespace zt::cuda {

constexpr int kColumnStrip = 32;   // columns per block (one warp wide: coalesced rows)
constexpr int kRowLanes = 8;       // rows summed side by side per block

// term(n, c) = m[n, c]: plain column sums (bias gradients).
template <class Format>
struct ValueTerm {
  const typename Format::Storage* m;
  int64_t cols;
  __device__ float operator()(int64_t row, int64_t col) const {
    return Format::to_float(m[row * cols + col]);
  }
};

// partials[chunk, c] = sum of term(n, c) over the rows n of `chunk`.
template <class Term>
__global__ void column_partial_sums_kernel(float* partials, int64_t rows, int64_t cols,
                                           int64_t rows_per_chunk, Term term) {
  ZT_SHARED(float, lane_sums, [kRowLanes][kColumnStrip + 1]);
  const int64_t col = blockIdx.x * int64_t{kColumnStrip} + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kRowLanes) sum += term(row, col);
  }
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += lane_sums[lane][threadIdx.x];
    partials[blockIdx.y * cols + col] = total;
  }
}

// dst[c] += sum over chunks (in order) of partials[chunk, c]. (A template only so that every
// file including this header shares one definition.)
template <class Unused = void>
__global__ void column_sums_finish_kernel(FloatArg dst, const float* partials,
                                                 int64_t chunks, int64_t cols) {
  const int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (col >= cols) return;
  float total = 0.0f;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * cols + col];
  dst.store(col, dst.load(col) + total);
}

// dst[cols] (any float dtype) += column sums of term over rows.
template <class Term>
void accumulate_column_sums(CudaBackendImpl& backend, FloatArg dst, int64_t rows, int64_t cols,
                            Term term) {
  if (rows == 0 || cols == 0) return;
  // At most ~256 chunks of at least 64 rows: enough blocks to fill the GPU for N = B*T tokens.
  constexpr int64_t kMinRowsPerChunk = 64, kMaxChunks = 256;
  int64_t rows_per_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
  if (rows_per_chunk < kMinRowsPerChunk) rows_per_chunk = kMinRowsPerChunk;
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  Buffer partials = backend.scratch(static_cast<size_t>(chunks * cols) * sizeof(float));  // [chunks, C]
  const dim3 grid(static_cast<unsigned int>((cols + kColumnStrip - 1) / kColumnStrip),
                  static_cast<unsigned int>(chunks));
  const dim3 block(kColumnStrip, kRowLanes);
  launch({grid, block, 0, backend.stream()}, column_partial_sums_kernel<Term>,
      static_cast<float*>(partials.data()), rows, cols, rows_per_chunk, term);
  ZT_CUDA_CHECK_LAUNCH("column_partial_sums_kernel");
  launch({grid_for(cols), kThreads, 0, backend.stream()}, column_sums_finish_kernel<>,
      dst, static_cast<const float*>(partials.data()), chunks, cols);
  ZT_CUDA_CHECK_LAUNCH("column_sums_finish_kernel");
}

}  // namespace zt::cuda
