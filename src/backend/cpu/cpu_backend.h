// The CPU reference backend: the class that implements zt::Backend with OpenBLAS + OpenMP, and
// the argument checks its ops share. The ops are split by topic over cpu_*.cpp files. Each op
// runs one fp32 kernel; bf16/fp16 arguments reach it through Fp32Staging (cpu_dtype_staging.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "backend/arg_checks.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_dtype_staging.h"
#include "backend/cpu/cpu_optimizer_kernels.h"

namespace zt::cpu {

// ---- argument checks (every message names the op, the argument and the problem) ------------

// A float matrix view of a tensor: the last dimension is the columns, all leading dimensions
// are flattened into rows (so x[B,T,C] is seen as [B*T, C]).
struct Matrix {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t numel() const { return rows * cols; }
};

// Throws unless `tensor` is a host tensor of `dtype` whose data is present (or has no elements).
// (Float arguments of any storage dtype: expect_host_float in cpu_dtype_staging.h.)
void expect_host(const char* op, const char* arg, const Tensor& tensor, DType dtype);
// fp32 host data of an argument.
float* f32_arg(const char* op, const char* arg, const Tensor& tensor);
// fp32 host argument seen as a matrix (needs at least one dimension).
Matrix f32_matrix(const char* op, const char* arg, const Tensor& tensor);
// Integer host arguments (token ids, masks, global row ids).
const int32_t* i32_arg(const char* op, const char* arg, const Tensor& tensor);
const uint8_t* u8_arg(const char* op, const char* arg, const Tensor& tensor);
const int64_t* i64_arg(const char* op, const char* arg, const Tensor& tensor);
// Sample-relative positions int32[B*T] of rope and attention (backend.h "positions within packed
// rows"), checked against that rule; nullptr for an empty tensor (positions[b,t] = t).
const int32_t* positions_arg(const char* op, const Tensor& positions, int64_t batch, int64_t time);
// Shape checks shared with the CUDA backend (backend/arg_checks.h).
using zt::expect_numel;
using zt::expect_same_shape;
using zt::expect_shape;

// ---- shared loops ---------------------------------------------------------------------------

// dst[c] += sum over rows n (in row order) of term(n, c), for c in [0, cols). Parallel over
// blocks of columns, so each sum is taken in the same order whatever the number of threads:
// parameter gradients (bias, norm weights) are deterministic.
template <class Term>
void accumulate_column_sums(float* dst, int64_t rows, int64_t cols, Term term) {
  constexpr int64_t kBlock = 128;  // columns per task: a few vector registers of sums
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock;
    const int64_t width = std::min(kBlock, cols - begin);
    float sums[kBlock] = {};  // sums[width]: this block's column sums
    for (int64_t n = 0; n < rows; ++n) {
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) sums[c] += term(n, begin + c);
    }
    for (int64_t c = 0; c < width; ++c) dst[begin + c] += sums[c];
  }
}

// ---- the backend ----------------------------------------------------------------------------

class CpuBackend final : public Backend {
 public:
  // Memory from `allocator` (both functions set), or aligned_alloc/free (both empty).
  explicit CpuBackend(HostAllocator allocator = {});

  Device device() const override { return Device::CPU; }
  std::string name() const override { return "cpu"; }

  void* allocate(size_t bytes) override;
  void release(void* pointer) override;
  void copy(Tensor dst, Tensor src) override;
  void fill(Tensor dst, float value) override;
  void discard(Tensor range) override;

  void accumulate(Tensor dst, Tensor src, float scale) override;
  void scale(Tensor dst, float factor) override;
  void clamp(Tensor x, float lo, float hi) override;
  void round_to(Tensor x, DType dtype) override;
  double sum_squares(Tensor x) override;
  bool has_inf_or_nan(Tensor x) override;

  void matmul(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b, float alpha,
              float beta) override;
  // Bias rows written into C, then one GEMM with beta = 1.
  void matmul_bias(Tensor c, Tensor a, Tensor b, Tensor bias) override;
  void add_bias(Tensor y, Tensor bias) override;
  void bias_backward(Tensor dbias, Tensor dy) override;

  void embedding_forward(Tensor out, Tensor table, Tensor ids) override;
  void embedding_backward(Tensor dtable, Tensor dout, Tensor ids) override;

  void rmsnorm_forward(Tensor y, Tensor rstd, Tensor x, Tensor weight, float eps) override;
  void rmsnorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dy, Tensor x,
                        Tensor weight, Tensor rstd) override;
  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, Tensor x, Tensor weight, Tensor bias,
                         float eps) override;
  void layernorm_backward(Tensor dx, GradStore dx_store, Tensor dweight, Tensor dbias, Tensor dy,
                          Tensor x, Tensor weight, Tensor mean, Tensor rstd) override;

  void rope_forward(Tensor x, Tensor inv_freq, Tensor positions) override;
  void rope_backward(Tensor dx, Tensor inv_freq, Tensor positions) override;

  void swiglu_forward(Tensor h, Tensor gate, Tensor up) override;
  void swiglu_backward(Tensor dgate, Tensor dup, Tensor dh, Tensor gate, Tensor up) override;
  void relu_forward(Tensor y, Tensor x) override;
  void relu_backward(Tensor dx, Tensor dy, Tensor y) override;

  void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, Tensor positions,
                         float scale) override;
  void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k,
                          Tensor v, Tensor out, Tensor lse, Tensor positions, float scale) override;
  void attention_cached_forward(Tensor out, Tensor q, Tensor k, Tensor v, float scale) override;

  double cross_entropy(Tensor logits, Tensor targets, Tensor mask, float grad_scale) override;

  void dropout(Tensor out, Tensor in, float p, RngKey key, Tensor row_ids) override;

  void dequantize_4bit(Tensor out, const Quant4View& weight) override;
  void quantize_blocks(Tensor q, Tensor scales, Tensor in, int bits, int64_t block) override;
  void dequantize_blocks(Tensor out, Tensor q, Tensor scales, int bits, int64_t block, bool accumulate) override;

  OptimizerKernels& optimizer_kernels() override { return optimizer_kernels_; }

 private:
  HostAllocator allocator_;
  CpuOptimizerKernels optimizer_kernels_;
};

}  // namespace zt::cpu
