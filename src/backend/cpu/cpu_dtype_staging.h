// Storage dtypes on the CPU backend: the dtype checks of float arguments (fp32/bf16/fp16), the
// fp32 <-> bf16/fp16 array conversions, and Fp32Staging, which lets every op run its one fp32
// kernel whatever its arguments' storage dtypes. A 16-bit argument is widened into an fp32
// scratch copy before the kernel (exact), and each 16-bit output is rounded back to its view's
// dtype ONCE after it (RNE; fp16 overflow becomes inf). fp32 arguments pass through as the same
// view: no copy, so the fp32 path is bit-identical to running the kernel directly. Scratch blocks
// are reused by the next ops on the same thread (at most 256 MiB kept per thread).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace zt::cpu {

// bf16 or fp16.
bool is_half(DType dtype);

// n values of the 16-bit format `dtype` (bf16 or fp16) to floats (exact).
void half_to_floats(float* dst, const uint16_t* src, int64_t n, DType dtype);
// n floats to the 16-bit format `dtype` (bf16 or fp16), round to nearest even.
void floats_to_half(uint16_t* dst, const float* src, int64_t n, DType dtype);

// Throws unless `tensor` is a host tensor of fp32, bf16 or fp16 whose data is present (or has
// no elements).
void expect_host_float(const char* op, const char* arg, const Tensor& tensor);
// Throws unless `tensor` has the dtype of `other` (one dtype for all activations of an op).
void expect_same_dtype(const char* op, const char* arg, const Tensor& tensor, const char* other_arg,
                       const Tensor& other);

// fp32 views of one op call's float arguments. Usage, at the top of an op:
//   Fp32Staging stage(op);
//   const Tensor x32 = stage.read("x", x);   // fp32 view of x: x itself when x is fp32
//   const Tensor y32 = stage.write("y", y);  // fp32 view the kernel fills
//   ... the fp32 kernel on x32, y32 ...
//   stage.write_back();                      // rounds y32 into y when y is 16-bit
// Every input is widened when it is staged, before the kernel writes anything, so outputs may
// alias inputs (in-place ops).
class Fp32Staging {
 public:
  explicit Fp32Staging(const char* op) : op_(op) {}
  ~Fp32Staging();  // hands the scratch back to this thread's cache
  Fp32Staging(const Fp32Staging&) = delete;
  Fp32Staging& operator=(const Fp32Staging&) = delete;

  // An argument the kernel only reads.
  Tensor read(const char* arg, const Tensor& tensor);
  // An argument the kernel overwrites entirely without reading it.
  Tensor write(const char* arg, const Tensor& tensor);
  // An argument the kernel reads, then writes (+=, beta != 0, in place).
  Tensor update(const char* arg, const Tensor& tensor);
  // Rounds every staged 16-bit output into its view. Call once, after the kernel: when the
  // kernel throws, the op's outputs stay untouched.
  void write_back();

 private:
  // A 64-byte aligned fp32 scratch view with the shape of `tensor` (as the backend's buffers,
  // so the kernels see the alignment they see on fp32 data).
  Tensor scratch_like(const Tensor& tensor);
  // A scratch block: its memory and capacity.
  struct Block {
    float* data;
    size_t bytes;
  };
  // Outputs to round back: the fp32 scratch and the 16-bit view it stands for.
  struct Output {
    Tensor scratch;
    Tensor stored;
  };

  const char* op_;
  std::vector<Block> scratch_;
  std::vector<Output> outputs_;
};

}  // namespace zt::cpu
