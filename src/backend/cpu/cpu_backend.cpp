// The CPU backend's argument checks, memory, dtype copies, elementwise ops and reductions,
// GEMM (OpenBLAS cblas_sgemm), bias and embedding ops, and make_cpu_backend().
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "backend/allocation_log.h"
#include "backend/cpu/cpu_dtype_staging.h"
#include "core/error.h"

namespace zt {
namespace cpu {

// ---- argument checks ------------------------------------------------------------------------

void expect_host(const char* op, const char* arg, const Tensor& tensor, DType dtype) {
  ZT_CHECK(tensor.device == Device::CPU, op, ": ", arg, " must be host memory, got ",
           tensor.describe());
  ZT_CHECK(tensor.dtype == dtype, op, ": ", arg, " must be ", dtype_name(dtype), ", got ",
           tensor.describe());
  ZT_CHECK(tensor.data != nullptr || tensor.numel() == 0, op, ": ", arg,
           " has no data (empty view ", tensor.describe(), ")");
}

float* f32_arg(const char* op, const char* arg, const Tensor& tensor) {
  expect_host(op, arg, tensor, DType::F32);
  return static_cast<float*>(tensor.data);
}

Matrix f32_matrix(const char* op, const char* arg, const Tensor& tensor) {
  float* data = f32_arg(op, arg, tensor);
  ZT_CHECK(tensor.ndim >= 1, op, ": ", arg, " must have at least one dimension, got ",
           tensor.describe());
  Matrix matrix;
  matrix.data = data;
  matrix.cols = tensor.dim(-1);
  matrix.rows = matrix.cols == 0 ? 0 : tensor.numel() / matrix.cols;
  return matrix;
}

const int32_t* i32_arg(const char* op, const char* arg, const Tensor& tensor) {
  expect_host(op, arg, tensor, DType::I32);
  return static_cast<const int32_t*>(tensor.data);
}

const uint8_t* u8_arg(const char* op, const char* arg, const Tensor& tensor) {
  expect_host(op, arg, tensor, DType::U8);
  return static_cast<const uint8_t*>(tensor.data);
}

const int64_t* i64_arg(const char* op, const char* arg, const Tensor& tensor) {
  expect_host(op, arg, tensor, DType::I64);
  return static_cast<const int64_t*>(tensor.data);
}

const int32_t* positions_arg(const char* op, const Tensor& positions, int64_t batch, int64_t time) {
  if (positions.empty()) return nullptr;
  const int32_t* data = i32_arg(op, "positions", positions);
  expect_numel(op, "positions", positions, batch * time, "B*T");
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* row = data + b * time;  // row[T]
    for (int64_t t = 0; t < time; ++t) {
      const bool restarts = row[t] == 0, continues = t > 0 && row[t] == row[t - 1] + 1;
      ZT_CHECK(restarts || continues, op, ": positions[", b, ", ", t, "] = ", row[t],
               " must be 0 (a sample starts) or positions[", b, ", ", t - 1, "] + 1",
               t > 0 ? cat(" = ", row[t - 1] + 1) : std::string(" (a row starts a sample)"));
    }
  }
  return data;
}

// ---- memory -------------------------------------------------------------------------------

namespace {
std::atomic<int64_t> cpu_bytes_in_use{0}, cpu_bytes_peak{0};  // cpu_backend_memory()

void count_cpu_bytes(int64_t delta) {
  const int64_t now = cpu_bytes_in_use.fetch_add(delta) + delta;
  int64_t peak = cpu_bytes_peak.load();
  while (now > peak && !cpu_bytes_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

CpuBackend::CpuBackend(HostAllocator allocator) : allocator_(std::move(allocator)) {
  ZT_CHECK(static_cast<bool>(allocator_.allocate) == static_cast<bool>(allocator_.release),
           "make_cpu_backend: the host allocator must set both allocate and release, or neither (got ",
           allocator_.allocate ? "allocate" : "release", " only)");
}

void* CpuBackend::allocate(size_t bytes) {
  constexpr size_t kAlignment = 64;  // a cache line; also what AVX-512 loads like
  if (allocator_.allocate) {
    void* pointer = allocator_.allocate(bytes);
    ZT_CHECK(pointer != nullptr, "cpu backend: the host allocator returned no memory for ", bytes, " bytes");
    if (reinterpret_cast<uintptr_t>(pointer) % kAlignment != 0) {
      allocator_.release(pointer);  // the error below is the one to report
      fail("cpu backend: the host allocator returned ", pointer, " for ", bytes, " bytes, which is not ",
           kAlignment, "-byte aligned");
    }
    log_allocation("cpu", bytes, pointer);
    return pointer;
  }
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* pointer = std::aligned_alloc(kAlignment, rounded);
  ZT_CHECK(pointer != nullptr, "cpu backend: cannot allocate ", bytes, " bytes of host memory");
  count_cpu_bytes(static_cast<int64_t>(malloc_usable_size(pointer)));
  log_allocation("cpu", bytes, pointer);
  return pointer;
}

void CpuBackend::release(void* pointer) {
  log_release("cpu", pointer);
  if (allocator_.release) {
    allocator_.release(pointer);
  } else {
    if (pointer) count_cpu_bytes(-static_cast<int64_t>(malloc_usable_size(pointer)));
    std::free(pointer);
  }
}

void CpuBackend::discard(Tensor range) {
  // Memory from a custom allocator (e.g. CUDA's pinned host memory) keeps its pages: they are
  // locked and registered with the driver, and dropping them would unmap what the GPU copies from.
  if (allocator_.allocate) return;
  // madvise(MADV_DONTNEED) on the whole pages inside the range: private anonymous memory is
  // returned to the system (RSS drops) and faulted back in, zeroed, when written again.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(range.data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data) + range.bytes()) / page * page;
  if (range.empty() || end <= begin) return;
  ZT_CHECK(madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0, "cpu backend: madvise of ",
           end - begin, " bytes failed: ", std::strerror(errno));
}

namespace {

// Loops below this many elements run on one thread: waking the team costs more than it saves.
constexpr int64_t kParallelThreshold = 32768;

// Sum of squares of a float array in fixed chunks of kChunk elements, each chunk in double
// and the chunks added in order: the result does not depend on the number of threads.
double chunked_sum_squares(const float* x, int64_t n) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));  // partial[chunks]
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t end = std::min(n, (chunk + 1) * kChunk);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = chunk * kChunk; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(chunk)] = sum;
  }
  double total = 0.0;
  for (double sum : partial) total += sum;
  return total;
}

// Fills an integer tensor (masks, ids) with `value`, which must be a whole number in range.
template <class Integer>
void fill_integer(const Tensor& dst, float value) {
  std::fill_n(static_cast<Integer*>(dst.data), dst.numel(), integer_fill_value<Integer>(dst, value));
}

}  // namespace

void CpuBackend::copy(Tensor dst, Tensor src) {
  ZT_CHECK(dst.device == Device::CPU && src.device == Device::CPU,
           "copy: the cpu backend copies host memory only, got dst ", dst.describe(), " and src ",
           src.describe());
  ZT_CHECK(dst.numel() == src.numel(), "copy: dst ", dst.describe(), " and src ", src.describe(),
           " must have the same number of elements");
  const int64_t n = src.numel();
  if (n == 0) return;
  ZT_CHECK(dst.data != nullptr && src.data != nullptr, "copy: empty view (dst ", dst.describe(),
           ", src ", src.describe(), ")");
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data) std::memmove(dst.data, src.data, src.bytes());
    return;
  }
  const bool dst_half = is_half(dst.dtype);
  const bool src_half = is_half(src.dtype);
  if (dst.dtype == DType::F32 && src_half) {
    half_to_floats(static_cast<float*>(dst.data), static_cast<const uint16_t*>(src.data), n,
                   src.dtype);
  } else if (dst_half && src.dtype == DType::F32) {
    floats_to_half(static_cast<uint16_t*>(dst.data), static_cast<const float*>(src.data), n,
                   dst.dtype);
  } else if (dst_half && src_half) {
    // bf16 <-> fp16 through fp32 (exact), then one rounding; in chunks to bound the scratch.
    constexpr int64_t kChunk = 65536;
    std::vector<float> scratch(static_cast<size_t>(std::min(n, kChunk)));  // scratch[chunk]
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t count = std::min(kChunk, n - begin);
      half_to_floats(scratch.data(), static_cast<const uint16_t*>(src.data) + begin, count,
                     src.dtype);
      floats_to_half(static_cast<uint16_t*>(dst.data) + begin, scratch.data(), count, dst.dtype);
    }
  } else {
    fail("copy: cannot convert ", src.describe(), " to ", dst.describe(),
         " (conversions are between fp32, bf16 and fp16 only)");
  }
}

void CpuBackend::fill(Tensor dst, float value) {
  ZT_CHECK(dst.device == Device::CPU, "fill: dst must be host memory, got ", dst.describe());
  const int64_t n = dst.numel();
  if (n == 0) return;
  ZT_CHECK(dst.data != nullptr, "fill: dst has no data (empty view ", dst.describe(), ")");
  switch (dst.dtype) {
    case DType::F32: {
      float* data = static_cast<float*>(dst.data);
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
      for (int64_t i = 0; i < n; ++i) data[i] = value;
      return;
    }
    case DType::BF16:
    case DType::F16: {
      const uint16_t bits = dst.dtype == DType::BF16 ? float_to_bf16(value) : float_to_fp16(value);
      uint16_t* data = static_cast<uint16_t*>(dst.data);
      std::fill(data, data + n, bits);
      return;
    }
    case DType::I32: return fill_integer<int32_t>(dst, value);
    case DType::I64: return fill_integer<int64_t>(dst, value);
    case DType::U8: return fill_integer<uint8_t>(dst, value);
    case DType::F64: {
      double* data = static_cast<double*>(dst.data);
      std::fill(data, data + n, static_cast<double>(value));
      return;
    }
  }
  fail("fill: unknown dtype in ", dst.describe());
}

// ---- elementwise ----------------------------------------------------------------------------

void CpuBackend::accumulate(Tensor dst, Tensor src, float scale_factor) {
  const char* op = "accumulate";
  Fp32Staging stage(op);
  const Tensor src32 = stage.read("src", src);  // before dst is written: src may alias dst
  float* out = f32_arg(op, "dst", stage.update("dst", dst));
  const float* in = src32.f32();
  expect_numel(op, "src", src, dst.numel(), "the elements of dst");
  const int64_t n = dst.numel();
  if (scale_factor == 1.0f) {  // the residual add: keep it a plain add
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) out[i] += in[i];
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) out[i] += scale_factor * in[i];
  }
  stage.write_back();
}

void CpuBackend::scale(Tensor dst, float factor) {
  Fp32Staging stage("scale");
  float* data = stage.update("dst", dst).f32();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) data[i] *= factor;
  stage.write_back();
}

void CpuBackend::clamp(Tensor x, float lo, float hi) {
  ZT_CHECK(lo <= hi, "clamp: lo ", lo, " > hi ", hi);
  Fp32Staging stage("clamp");
  float* data = stage.update("x", x).f32();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) data[i] = data[i] < lo ? lo : data[i] > hi ? hi : data[i];  // NaN compares false: kept
  stage.write_back();
}

// In place, element by element (RNE, as copy() rounds): a temporary of `dtype` here was an
// allocation in every 16-bit run's step that the memory model's counting backend, rounding in
// place, never made (tests/mpi/allocation_drift.py's 16-bit cases).
void CpuBackend::round_to(Tensor x, DType dtype) {
  ZT_CHECK(x.dtype == DType::F32, "round_to: expected fp32 values, got ", x.describe());
  ZT_CHECK(is_float(dtype), "round_to: cannot round to ", dtype_name(dtype));
  float* data = x.f32();
  const int64_t n = x.numel();
  if (dtype == DType::BF16) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) data[i] = bf16_to_float(float_to_bf16(data[i]));
  } else if (dtype == DType::F16) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) data[i] = fp16_to_float(float_to_fp16(data[i]));
  }
}

double CpuBackend::sum_squares(Tensor x) {
  Fp32Staging stage("sum_squares");
  return chunked_sum_squares(stage.read("x", x).f32(), x.numel());
}

bool CpuBackend::has_inf_or_nan(Tensor x) {
  Fp32Staging stage("has_inf_or_nan");
  const float* data = stage.read("x", x).f32();
  const int64_t n = x.numel();
  int found = 0;
  constexpr float kMaxFinite = std::numeric_limits<float>::max();
#pragma omp parallel for simd reduction(| : found) schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) found |= !(std::fabs(data[i]) <= kMaxFinite);  // NaN: false
  return found != 0;
}

// ---- GEMM -----------------------------------------------------------------------------------

namespace {

// matmul's storage rule: a and b one float dtype; c that dtype, or fp32 (16-bit inputs
// accumulated into fp32 weight gradients).
void check_gemm_dtypes(const char* op, const Tensor& c, const Tensor& a, const Tensor& b) {
  expect_host_float(op, "a", a);
  expect_same_dtype(op, "b", b, "a", a);
  ZT_CHECK(c.dtype == a.dtype || c.dtype == DType::F32, op, ": c ", c.describe(),
           " must have the dtype of a ", a.describe(), " or be fp32");
}

// C[M,N] = alpha op(A) op(B) + beta C on fp32 views (cblas_sgemm).
void fp32_gemm(CpuBackend& backend, const char* op, const Tensor& c, const Tensor& a, bool transpose_a,
               const Tensor& b, bool transpose_b, float alpha, float beta) {
  const Matrix out = f32_matrix(op, "c", c);
  const Matrix left = f32_matrix(op, "a", a);
  const Matrix right = f32_matrix(op, "b", b);
  const GemmDims dims = matmul_dims(c, a, transpose_a, b, transpose_b);
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  constexpr int64_t kBlasLimit = std::numeric_limits<int>::max();
  ZT_CHECK(m <= kBlasLimit && n <= kBlasLimit && k <= kBlasLimit, op, ": dimensions of c ", c.describe(),
           " exceed the BLAS int range");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no products: C = beta * C (BLAS does this too, but be explicit)
    if (beta == 0.0f) {
      backend.fill(c, 0.0f);
    } else {
      backend.scale(c, beta);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, left.data, static_cast<int>(left.cols), right.data,
              static_cast<int>(right.cols), beta, out.data, static_cast<int>(n));
}

}  // namespace

void CpuBackend::matmul(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b,
                        float alpha, float beta) {
  const char* op = "matmul";
  check_gemm_dtypes(op, c, a, b);
  Fp32Staging stage(op);
  const Tensor a32 = stage.read("a", a);
  const Tensor b32 = stage.read("b", b);
  // beta = 0: BLAS never reads C (NaN in C does not propagate), so it needs no widening.
  const Tensor c32 = beta == 0.0f ? stage.write("c", c) : stage.update("c", c);
  fp32_gemm(*this, op, c32, a32, transpose_a, b32, transpose_b, alpha, beta);
  stage.write_back();
}

void CpuBackend::matmul_bias(Tensor c, Tensor a, Tensor b, Tensor bias) {
  const char* op = "matmul_bias";
  check_gemm_dtypes(op, c, a, b);
  Fp32Staging stage(op);
  const Tensor a32 = stage.read("a", a);
  const Tensor b32 = stage.read("b", b);
  const Tensor c32 = stage.write("c", c);
  matmul_dims(c, a, false, b, true, "matmul_bias");  // shapes checked before C is written
  if (bias.empty()) {
    fp32_gemm(*this, op, c32, a32, false, b32, true, 1.0f, 0.0f);
  } else {
    // C = bias rows first, then one GEMM with beta = 1 adds A B^T onto them: one pass over C
    // fewer than matmul + add_bias, and a 16-bit C is rounded once, after the bias.
    const Matrix out = f32_matrix(op, "c", c32);
    const float* bias_data = stage.read("bias", bias).f32();
    expect_shape(op, "bias", bias, {out.cols});
    const int64_t cols = out.cols;
#pragma omp parallel for schedule(static) if (out.numel() > kParallelThreshold)
    for (int64_t row = 0; row < out.rows; ++row)
      std::memcpy(out.data + row * cols, bias_data, static_cast<size_t>(cols) * sizeof(float));
    fp32_gemm(*this, op, c32, a32, false, b32, true, 1.0f, 1.0f);
  }
  stage.write_back();
}

void CpuBackend::add_bias(Tensor y, Tensor bias) {
  const char* op = "add_bias";
  Fp32Staging stage(op);
  const float* bias_data = stage.read("bias", bias).f32();
  const Matrix out = f32_matrix(op, "y", stage.update("y", y));
  expect_shape(op, "bias", bias, {out.cols});
  const int64_t cols = out.cols;
#pragma omp parallel for schedule(static) if (out.numel() > kParallelThreshold)
  for (int64_t row = 0; row < out.rows; ++row) {
    float* y_row = out.data + row * cols;  // y_row[C]
#pragma omp simd
    for (int64_t col = 0; col < cols; ++col) y_row[col] += bias_data[col];
  }
  stage.write_back();
}

void CpuBackend::bias_backward(Tensor dbias, Tensor dy) {
  if (dbias.empty()) return;  // frozen bias
  const char* op = "bias_backward";
  Fp32Staging stage(op);
  const Matrix grad_out = f32_matrix(op, "dy", stage.read("dy", dy));
  float* dbias_data = stage.update("dbias", dbias).f32();
  expect_shape(op, "dbias", dbias, {grad_out.cols});
  const float* dy_data = grad_out.data;
  const int64_t cols = grad_out.cols;
  accumulate_column_sums(dbias_data, grad_out.rows, cols,
                         [=](int64_t row, int64_t col) { return dy_data[row * cols + col]; });
  stage.write_back();
}

// ---- embedding ------------------------------------------------------------------------------

namespace {
// Throws unless every id is in [0, vocab) (checked before the parallel loops, which cannot throw).
void check_ids(const char* op, const int32_t* ids, int64_t count, int64_t vocab) {
  for (int64_t i = 0; i < count; ++i) {
    ZT_CHECK(ids[i] >= 0 && ids[i] < vocab, op, ": ids[", i, "] = ", ids[i],
             " is outside the vocabulary [0, ", vocab, ")");
  }
}
}  // namespace

void CpuBackend::embedding_forward(Tensor out, Tensor table, Tensor ids) {
  const char* op = "embedding_forward";
  const int32_t* id_data = i32_arg(op, "ids", ids);
  // A gather of whole rows: out and table share one dtype, so the rows are copied as stored
  // (what widening, copying and rounding back would give, without widening the whole table).
  expect_host_float(op, "out", out);
  expect_host_float(op, "table", table);
  expect_same_dtype(op, "table", table, "out", out);
  const EmbeddingDims dims = embedding_dims(op, "out", out, "table", table, ids);
  check_ids(op, id_data, dims.rows, dims.vocab);
  if (dims.cols == 0) return;  // rows of no channels: nothing to copy
  const int64_t rows = dims.rows;
  const size_t row_bytes = static_cast<size_t>(dims.cols) * dtype_size(out.dtype);
  char* out_bytes = static_cast<char*>(out.data);
  const char* table_bytes = static_cast<const char*>(table.data);
#pragma omp parallel for schedule(static) if (out.numel() > kParallelThreshold)
  for (int64_t row = 0; row < rows; ++row) {
    std::memcpy(out_bytes + static_cast<size_t>(row) * row_bytes,
                table_bytes + static_cast<size_t>(id_data[row]) * row_bytes, row_bytes);
  }
}

void CpuBackend::embedding_backward(Tensor dtable, Tensor dout, Tensor ids) {
  if (dtable.empty()) return;  // frozen table
  Fp32Staging stage("embedding_backward");
  const Matrix grad_out = f32_matrix("embedding_backward", "dout", stage.read("dout", dout));
  const Matrix grad_table = f32_matrix("embedding_backward", "dtable", stage.update("dtable", dtable));
  const int32_t* id_data = i32_arg("embedding_backward", "ids", ids);
  const EmbeddingDims dims = embedding_dims("embedding_backward", "dout", dout, "dtable", dtable, ids);
  check_ids("embedding_backward", id_data, dims.rows, dims.vocab);
  // Parallel over blocks of channels, rows in order inside: repeated ids add up in the same
  // order whatever the number of threads (deterministic), and no two threads share an element.
  const int64_t cols = grad_out.cols;
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (grad_out.numel() > kParallelThreshold)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock;
    const int64_t width = std::min(kBlock, cols - begin);
    for (int64_t row = 0; row < grad_out.rows; ++row) {
      float* table_row = grad_table.data + id_data[row] * cols + begin;  // table_row[width]
      const float* dout_row = grad_out.data + row * cols + begin;        // dout_row[width]
#pragma omp simd
      for (int64_t col = 0; col < width; ++col) table_row[col] += dout_row[col];
    }
  }
  stage.write_back();
}

}  // namespace cpu

CpuBackendMemory cpu_backend_memory() { return {cpu::cpu_bytes_in_use.load(), cpu::cpu_bytes_peak.load()}; }

void reset_cpu_backend_peak() { cpu::cpu_bytes_peak.store(cpu::cpu_bytes_in_use.load()); }

std::unique_ptr<Backend> make_cpu_backend(HostAllocator allocator) {
  return std::make_unique<cpu::CpuBackend>(std::move(allocator));
}

}  // namespace zt
