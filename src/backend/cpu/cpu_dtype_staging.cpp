// The CPU backend's float dtype checks, fp32 <-> bf16/fp16 array conversions and Fp32Staging
// (see cpu_dtype_staging.h).
#include "backend/cpu/cpu_dtype_staging.h"

#include <cstddef>
#include <cstdlib>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace zt::cpu {

namespace {
constexpr int64_t kParallelThreshold = 32768;              // elements; below this one thread is faster
constexpr size_t kScratchAlignment = 64;                   // as CpuBackend::allocate
constexpr size_t kCachedScratchLimit = size_t{256} << 20;  // bytes kept per thread between ops

// Scratch blocks of finished ops, kept for the next ops on the same thread. Why: a fresh
// allocation of a few MiB is a new mmap whose every page faults on first touch, which made a
// bf16 matmul [512x1024]x[1024x1024] 1.6x slower than fp32; reusing blocks brings that to a few
// percent. At most kCachedScratchLimit bytes are kept (the oldest blocks are freed first).
class ScratchCache {
 public:
  ~ScratchCache() {
    for (const auto& [data, bytes] : blocks_) std::free(data);
  }
  // The smallest cached block of at least `bytes`, or nullptr.
  float* take(size_t bytes, size_t& capacity) {
    size_t best = blocks_.size();
    for (size_t i = 0; i < blocks_.size(); ++i) {
      if (blocks_[i].second >= bytes && (best == blocks_.size() || blocks_[i].second < blocks_[best].second))
        best = i;
    }
    if (best == blocks_.size()) return nullptr;
    float* data = blocks_[best].first;
    capacity = blocks_[best].second;
    cached_bytes_ -= capacity;
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(best));
    return data;
  }
  void give(float* data, size_t bytes) {
    if (bytes > kCachedScratchLimit) {
      std::free(data);
      return;
    }
    blocks_.emplace_back(data, bytes);
    cached_bytes_ += bytes;
    while (cached_bytes_ > kCachedScratchLimit) {
      std::free(blocks_.front().first);
      cached_bytes_ -= blocks_.front().second;
      blocks_.erase(blocks_.begin());
    }
  }

 private:
  std::vector<std::pair<float*, size_t>> blocks_;  // (memory, capacity in bytes), oldest first
  size_t cached_bytes_ = 0;
};

thread_local ScratchCache scratch_cache;
}  // namespace

bool is_half(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

void half_to_floats(float* dst, const uint16_t* src, int64_t n, DType dtype) {
  if (dtype == DType::BF16) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
  } else {  // (simd: the fp16 conversions are branch-free and inline, core/dtype.h)
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
  }
}

void floats_to_half(uint16_t* dst, const float* src, int64_t n, DType dtype) {
  if (dtype == DType::BF16) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_fp16(src[i]);
  }
}

void expect_host_float(const char* op, const char* arg, const Tensor& tensor) {
  ZT_CHECK(tensor.device == Device::CPU, op, ": ", arg, " must be host memory, got ", tensor.describe());
  ZT_CHECK(tensor.dtype == DType::F32 || is_half(tensor.dtype), op, ": ", arg,
           " must be fp32, bf16 or fp16, got ", tensor.describe());
  ZT_CHECK(tensor.data != nullptr || tensor.numel() == 0, op, ": ", arg, " has no data (empty view ",
           tensor.describe(), ")");
}

void expect_same_dtype(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                       const Tensor& other) {
  ZT_CHECK(tensor.dtype == other.dtype, op, ": ", arg, " ", tensor.describe(), " must have the dtype of ",
           other_arg, " ", other.describe());
}

Fp32Staging::~Fp32Staging() {
  for (const Block& block : scratch_) scratch_cache.give(block.data, block.bytes);
}

Tensor Fp32Staging::scratch_like(const Tensor& tensor) {
  Tensor scratch = tensor;
  scratch.dtype = DType::F32;
  const int64_t n = tensor.numel();
  if (n == 0) {
    scratch.data = nullptr;
    return scratch;
  }
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + kScratchAlignment - 1) / kScratchAlignment *
                       kScratchAlignment;
  size_t capacity = bytes;
  float* data = scratch_cache.take(bytes, capacity);
  if (data == nullptr) data = static_cast<float*>(std::aligned_alloc(kScratchAlignment, bytes));
  ZT_CHECK(data != nullptr, op_, ": cannot allocate ", bytes, " bytes of fp32 scratch for ",
           tensor.describe());
  scratch_.push_back({data, capacity});
  scratch.data = data;
  return scratch;
}

Tensor Fp32Staging::read(const char* arg, const Tensor& tensor) {
  expect_host_float(op_, arg, tensor);
  if (tensor.dtype == DType::F32) return tensor;
  Tensor scratch = scratch_like(tensor);
  half_to_floats(static_cast<float*>(scratch.data), static_cast<const uint16_t*>(tensor.data), tensor.numel(),
                 tensor.dtype);
  return scratch;
}

Tensor Fp32Staging::write(const char* arg, const Tensor& tensor) {
  expect_host_float(op_, arg, tensor);
  if (tensor.dtype == DType::F32) return tensor;
  Tensor scratch = scratch_like(tensor);
  if (tensor.numel() > 0) outputs_.push_back({scratch, tensor});
  return scratch;
}

Tensor Fp32Staging::update(const char* arg, const Tensor& tensor) {
  Tensor scratch = read(arg, tensor);
  if (is_half(tensor.dtype) && tensor.numel() > 0) outputs_.push_back({scratch, tensor});
  return scratch;
}

void Fp32Staging::write_back() {
  for (const Output& output : outputs_) {
    floats_to_half(static_cast<uint16_t*>(output.stored.data), static_cast<const float*>(output.scratch.data),
                   output.stored.numel(), output.stored.dtype);
  }
  outputs_.clear();
}

}  // namespace zt::cpu
