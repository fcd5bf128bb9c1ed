// The emulated cuBLASLt (src/emu/emu_cublaslt.cpp), through the real cublasLt.h API as the CUDA
// backend calls it: column-major D = alpha op(A) op(B) + beta C for the four op combinations on
// odd shapes with padded leading dimensions, in fp32, bf16 and fp16 (16-bit and fp32 outputs),
// against a double reference and against the CPU backend's matmul; beta = 0 ignoring NaN in C,
// in-place C == D, the bias epilogue, TF32 rounding, the NOT_SUPPORTED and INVALID_VALUE cases,
// the alignment an algorithm was chosen for, deferred execution on the stream, device pointer
// mode, and operands a GPU could not read.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

namespace {

using zt::DType;

// ---- RAII wrappers ------------------------------------------------------------------------------

struct Stream {
  Stream() { BOOST_REQUIRE(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(handle); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void synchronize() const { BOOST_REQUIRE(cudaStreamSynchronize(handle) == cudaSuccess); }
  cudaStream_t handle = nullptr;
};

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { BOOST_REQUIRE(cudaMalloc(&data, bytes) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data = nullptr;
};

struct Handle {
  Handle() { BOOST_REQUIRE_EQUAL(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasLtDestroy(handle); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cublasLtHandle_t handle = nullptr;
};

struct Desc {
  explicit Desc(cublasComputeType_t compute = CUBLAS_COMPUTE_32F, cudaDataType_t scale = CUDA_R_32F) {
    BOOST_REQUIRE_EQUAL(cublasLtMatmulDescCreate(&desc, compute, scale), CUBLAS_STATUS_SUCCESS);
  }
  ~Desc() { cublasLtMatmulDescDestroy(desc); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    BOOST_REQUIRE_EQUAL(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)),
                        CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatmulDesc_t desc = nullptr;
};

struct Layout {
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    BOOST_REQUIRE_EQUAL(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                   static_cast<uint64_t>(cols), ld),
                        CUBLAS_STATUS_SUCCESS);
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(layout); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  cublasLtMatrixLayout_t layout = nullptr;
};

struct Preference {
  Preference() { BOOST_REQUIRE_EQUAL(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(preference); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  void set(cublasLtMatmulPreferenceAttributes_t attribute, uint32_t value) {
    BOOST_REQUIRE_EQUAL(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)),
                        CUBLAS_STATUS_SUCCESS);
  }
  void set_all_alignments(uint32_t bytes) {
    for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      set(attribute, bytes);
  }
  cublasLtMatmulPreference_t preference = nullptr;
};

// ---- values in the three storage dtypes ---------------------------------------------------------

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// Stores `values` in `dtype` at `out` (the project's own RNE conversions, independent of the
// cuda_bf16.h / cuda_fp16.h ones the emulator uses).
void encode(const std::vector<float>& values, DType dtype, void* out) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      static_cast<float*>(out)[i] = values[i];
    } else {
      const uint16_t bits = dtype == DType::BF16 ? zt::float_to_bf16(values[i]) : zt::float_to_fp16(values[i]);
      static_cast<uint16_t*>(out)[i] = bits;
    }
  }
}

std::vector<float> decode(const void* data, DType dtype, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::F32) {
      values[i] = static_cast<const float*>(data)[i];
    } else {
      const uint16_t bits = static_cast<const uint16_t*>(data)[i];
      values[i] = dtype == DType::BF16 ? zt::bf16_to_float(bits) : zt::fp16_to_float(bits);
    }
  }
  return values;
}

// Uniform in [-1, 1), already representable in `dtype`.
std::vector<float> random_values(size_t count, DType dtype, std::mt19937& random) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = zt::round_to(dtype, uniform(random));
  return values;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- one GEMM case --------------------------------------------------------------------------------

// A stored column-major matrix; elements between rows and ld are NaN (never read).
struct HostMatrix {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> values;  // ld * cols
  float at(int64_t i, int64_t j) const { return values[static_cast<size_t>(i + j * ld)]; }
};

HostMatrix random_matrix(int64_t rows, int64_t cols, int64_t ld, DType dtype, std::mt19937& random) {
  HostMatrix matrix{rows, cols, ld, std::vector<float>(static_cast<size_t>(ld * cols), kNaN)};
  for (int64_t j = 0; j < cols; ++j) {
    const std::vector<float> column = random_values(static_cast<size_t>(rows), dtype, random);
    std::copy(column.begin(), column.end(), matrix.values.begin() + j * ld);
  }
  return matrix;
}

struct GemmCase {
  DType input = DType::F32, output = DType::F32;
  bool transa = false, transb = false;
  int64_t m = 7, n = 5, k = 13;
  int64_t pad = 3;  // ld = rows + pad (D: + pad + 1, so that C's and D's differ)
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  bool in_place = false;  // D is C (same memory and layout)
  bool nan_in_c = false;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  std::string label() const {
    return std::string(zt::dtype_name(input)) + "->" + zt::dtype_name(output) + (transa ? " A^T" : " A") +
           (transb ? " B^T" : " B") + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
           " k=" + std::to_string(k) + " pad=" + std::to_string(pad) + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta) + (bias ? " bias" : "") + (in_place ? " in-place" : "");
  }
};

struct Inputs {
  HostMatrix a, b, c;
  std::vector<float> bias;
};

Inputs make_inputs(const GemmCase& gemm, uint32_t seed) {
  std::mt19937 random(seed);
  Inputs inputs;
  const auto [a_rows, a_cols] = gemm.transa ? std::pair{gemm.k, gemm.m} : std::pair{gemm.m, gemm.k};
  const auto [b_rows, b_cols] = gemm.transb ? std::pair{gemm.n, gemm.k} : std::pair{gemm.k, gemm.n};
  inputs.a = random_matrix(a_rows, a_cols, a_rows + gemm.pad, gemm.input, random);
  inputs.b = random_matrix(b_rows, b_cols, b_rows + gemm.pad, gemm.input, random);
  inputs.c = random_matrix(gemm.m, gemm.n, gemm.m + gemm.pad, gemm.output, random);
  if (gemm.nan_in_c) std::fill(inputs.c.values.begin(), inputs.c.values.end(), kNaN);
  inputs.bias = random_values(static_cast<size_t>(gemm.m), gemm.output, random);
  return inputs;
}

float op_a(const GemmCase& gemm, const Inputs& inputs, int64_t i, int64_t p) {
  return gemm.transa ? inputs.a.at(p, i) : inputs.a.at(i, p);
}
float op_b(const GemmCase& gemm, const Inputs& inputs, int64_t p, int64_t j) {
  return gemm.transb ? inputs.b.at(j, p) : inputs.b.at(p, j);
}

// The exact result in double (dense column-major m x n), and the sum of the magnitudes of its
// terms (the scale of the rounding errors any fp32 computation makes).
struct Reference {
  std::vector<double> values, magnitude;
};

Reference reference(const GemmCase& gemm, const Inputs& inputs) {
  Reference result;
  for (int64_t j = 0; j < gemm.n; ++j) {
    for (int64_t i = 0; i < gemm.m; ++i) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < gemm.k; ++p) {
        const double product = static_cast<double>(op_a(gemm, inputs, i, p)) * op_b(gemm, inputs, p, j);
        sum += product;
        magnitude += std::fabs(product);
      }
      double value = gemm.alpha * sum;
      magnitude *= std::fabs(gemm.alpha);
      if (gemm.beta != 0.0f) {
        value += static_cast<double>(gemm.beta) * inputs.c.at(i, j);
        magnitude += std::fabs(static_cast<double>(gemm.beta) * inputs.c.at(i, j));
      }
      if (gemm.bias) {
        value += inputs.bias[static_cast<size_t>(i)];
        magnitude += std::fabs(inputs.bias[static_cast<size_t>(i)]);
      }
      result.values.push_back(value);
      result.magnitude.push_back(magnitude);
    }
  }
  return result;
}

// Up to one unit in the last place of the output dtype (two roundings of nearly the same value
// may land on neighbours), plus fp32 accumulation error.
void check_close(const std::vector<float>& got, const std::vector<double>& expected,
                 const std::vector<double>& magnitude, DType output, double accumulation_error,
                 const std::string& label) {
  BOOST_REQUIRE_EQUAL(got.size(), expected.size());
  const double ulp = output == DType::BF16 ? 0x1p-7 : output == DType::F16 ? 0x1p-10 : 0x1p-23;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = ulp * std::fabs(expected[i]) + accumulation_error * magnitude[i] + 1e-30;
    BOOST_TEST(std::fabs(got[i] - expected[i]) <= tolerance,
               label << " element " << i << ": " << got[i] << " vs " << expected[i] << " (tolerance "
                     << tolerance << ")");
  }
}

size_t bytes_of(const HostMatrix& matrix, DType dtype) { return matrix.values.size() * zt::dtype_size(dtype); }

// Runs the case through the emulated cuBLASLt as cuda_gemm.cpp does (heuristic, then matmul
// on a stream, then a synchronisation). Returns D as dense column-major m x n floats; checks
// that D's padding (between rows and ld) was not written.
std::vector<float> run_on_device(const GemmCase& gemm, const Inputs& inputs) {
  const cudaDataType_t in = cuda_type(gemm.input), out = cuda_type(gemm.output);
  DeviceBuffer a(bytes_of(inputs.a, gemm.input)), b(bytes_of(inputs.b, gemm.input));
  DeviceBuffer c(bytes_of(inputs.c, gemm.output));
  encode(inputs.a.values, gemm.input, a.data);
  encode(inputs.b.values, gemm.input, b.data);
  encode(inputs.c.values, gemm.output, c.data);
  const int64_t ld_d = gemm.in_place ? inputs.c.ld : gemm.m + gemm.pad + 1;
  const size_t d_count = static_cast<size_t>(ld_d * gemm.n);
  DeviceBuffer d_own(d_count * zt::dtype_size(gemm.output));  // 0xFF bytes (NaN): poisoned
  void* d = gemm.in_place ? c.data : d_own.data;
  DeviceBuffer bias(inputs.bias.size() * zt::dtype_size(gemm.output));
  encode(inputs.bias, gemm.output, bias.data);

  Handle handle;
  Desc desc(gemm.compute);
  const cublasOperation_t op_a_value = gemm.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b_value = gemm.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a_value);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b_value);
  if (gemm.bias) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data));
  }
  Layout layout_a(in, inputs.a.rows, inputs.a.cols, inputs.a.ld);
  Layout layout_b(in, inputs.b.rows, inputs.b.cols, inputs.b.ld);
  Layout layout_c(out, gemm.m, gemm.n, inputs.c.ld);
  Layout layout_d_own(out, gemm.m, gemm.n, ld_d);
  const cublasLtMatrixLayout_t layout_d = gemm.in_place ? layout_c.layout : layout_d_own.layout;
  Preference preference;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  BOOST_REQUIRE_EQUAL(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, layout_a.layout, layout_b.layout,
                                                     layout_c.layout, layout_d, preference.preference, 1,
                                                     &result, &found),
                      CUBLAS_STATUS_SUCCESS);
  BOOST_REQUIRE_EQUAL(found, 1);
  BOOST_TEST(result.workspaceSize == 0u);
  BOOST_TEST(result.state == CUBLAS_STATUS_SUCCESS);
  Stream stream;
  BOOST_REQUIRE_EQUAL(cublasLtMatmul(handle.handle, desc.desc, &gemm.alpha, a.data, layout_a.layout, b.data,
                                     layout_b.layout, &gemm.beta, c.data, layout_c.layout, d, layout_d,
                                     &result.algo, nullptr, 0, stream.handle),
                      CUBLAS_STATUS_SUCCESS);
  stream.synchronize();
  const std::vector<float> stored = decode(d, gemm.output, d_count);
  std::vector<float> dense;
  for (int64_t j = 0; j < gemm.n; ++j) {
    for (int64_t i = 0; i < ld_d; ++i) {
      const float value = stored[static_cast<size_t>(i + j * ld_d)];
      if (i < gemm.m) {
        dense.push_back(value);
      } else {
        BOOST_TEST(std::isnan(value), gemm.label() << ": D's padding was written at row " << i);
      }
    }
  }
  return dense;
}

// The same product through the CPU backend's row-major matmul: column-major D (m x n) is the
// row-major D^T [n, m] = op(B)^T op(A)^T, and a packed column-major matrix of r x c is the
// row-major [c, r] (the mapping cuda_gemm.cpp uses the other way round). Needs pad == 0.
std::vector<float> run_on_cpu_backend(const GemmCase& gemm, const Inputs& inputs) {
  BOOST_REQUIRE(gemm.pad == 0 && !gemm.bias);
  const std::unique_ptr<zt::Backend> cpu = zt::make_cpu_backend();
  std::vector<float> a_storage(inputs.a.values.size()), b_storage(inputs.b.values.size());
  std::vector<float> c_storage(inputs.c.values.size());  // large enough for any dtype
  encode(inputs.a.values, gemm.input, a_storage.data());
  encode(inputs.b.values, gemm.input, b_storage.data());
  encode(inputs.c.values, gemm.output, c_storage.data());
  const zt::Tensor a(a_storage.data(), gemm.input, {inputs.a.cols, inputs.a.rows});
  const zt::Tensor b(b_storage.data(), gemm.input, {inputs.b.cols, inputs.b.rows});
  const zt::Tensor c(c_storage.data(), gemm.output, {gemm.n, gemm.m});
  // D^T = op(B)^T op(A)^T: the row-major view of B's storage is B^T, so op(B)^T is that view
  // transposed exactly when TRANSB is T; likewise for A.
  cpu->matmul(c, b, gemm.transb, a, gemm.transa, gemm.alpha, gemm.beta);
  return decode(c_storage.data(), gemm.output, static_cast<size_t>(gemm.m * gemm.n));
}

struct TypeCombination {
  DType input, output;
};
const TypeCombination kTypeCombinations[] = {{DType::F32, DType::F32},  {DType::BF16, DType::BF16},
                                             {DType::BF16, DType::F32}, {DType::F16, DType::F16},
                                             {DType::F16, DType::F32}};

// The heuristic's answer for a problem of m x n x k with the given types (packed layouts).
struct HeuristicAnswer {
  cublasStatus_t status;
  int found;
};

HeuristicAnswer ask_heuristic(cudaDataType_t a_type, cudaDataType_t b_type, cudaDataType_t cd_type, Desc& desc,
                              Preference& preference, int64_t m = 8, int64_t n = 8, int64_t k = 8) {
  Handle handle;
  Layout a(a_type, m, k, m), b(b_type, k, n, k), c(cd_type, m, n, m), d(cd_type, m, n, m);
  cublasLtMatmulHeuristicResult_t result{};
  int found = -1;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle.handle, desc.desc, a.layout, b.layout, c.layout, d.layout, preference.preference, 1, &result, &found);
  return {status, found};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emu_cublaslt)

BOOST_AUTO_TEST_CASE(all_ops_and_types_on_odd_shapes_match_a_double_reference) {
  uint32_t seed = 1;
  for (const auto& [input, output] : kTypeCombinations) {
    for (int ops = 0; ops < 4; ++ops) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-1.5f, 0.75f}}) {
        GemmCase gemm;
        gemm.input = input;
        gemm.output = output;
        gemm.transa = ops & 1;
        gemm.transb = ops & 2;
        gemm.alpha = alpha;
        gemm.beta = beta;
        const Inputs inputs = make_inputs(gemm, seed++);
        const Reference expected = reference(gemm, inputs);
        check_close(run_on_device(gemm, inputs), expected.values, expected.magnitude, output, 1e-6, gemm.label());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(matches_the_cpu_backend_matmul) {
  uint32_t seed = 100;
  for (const auto& [input, output] : kTypeCombinations) {
    for (int ops = 0; ops < 4; ++ops) {
      for (const auto& [m, n, k] : {std::tuple{7, 5, 13}, std::tuple{33, 17, 65}}) {
        GemmCase gemm;
        gemm.input = input;
        gemm.output = output;
        gemm.transa = ops & 1;
        gemm.transb = ops & 2;
        gemm.m = m;
        gemm.n = n;
        gemm.k = k;
        gemm.pad = 0;
        gemm.alpha = 0.75f;
        gemm.beta = 0.5f;
        const Inputs inputs = make_inputs(gemm, seed++);
        const Reference expected = reference(gemm, inputs);
        const std::vector<float> cpu = run_on_cpu_backend(gemm, inputs);
        // The CPU backend itself against the reference: the mapping above is right.
        check_close(cpu, expected.values, expected.magnitude, output, 1e-5, gemm.label() + " (cpu)");
        const std::vector<double> cpu_values(cpu.begin(), cpu.end());
        check_close(run_on_device(gemm, inputs), cpu_values, expected.magnitude, output, 1e-5,
                    gemm.label() + " (device vs cpu)");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(beta_zero_does_not_read_c) {
  for (const auto& [input, output] : kTypeCombinations) {
    GemmCase gemm;
    gemm.input = input;
    gemm.output = output;
    gemm.nan_in_c = true;
    const Inputs inputs = make_inputs(gemm, 7);
    const Reference expected = reference(gemm, inputs);
    check_close(run_on_device(gemm, inputs), expected.values, expected.magnitude, output, 1e-6,
                gemm.label() + " NaN in C");
  }
}

BOOST_AUTO_TEST_CASE(in_place_accumulates_into_c) {
  // C == D with one layout: the way cuda_gemm.cpp calls it (beta 1: gradient accumulation).
  for (const auto& [input, output] : kTypeCombinations) {
    GemmCase gemm;
    gemm.input = input;
    gemm.output = output;
    gemm.transb = true;
    gemm.beta = 1.0f;
    gemm.in_place = true;
    const Inputs inputs = make_inputs(gemm, 11);
    const Reference expected = reference(gemm, inputs);
    check_close(run_on_device(gemm, inputs), expected.values, expected.magnitude, output, 1e-6, gemm.label());
  }
}

BOOST_AUTO_TEST_CASE(bias_epilogue_adds_a_vector_over_d_rows) {
  uint32_t seed = 200;
  for (const auto& [input, output] : kTypeCombinations) {
    for (int ops = 0; ops < 4; ++ops) {
      GemmCase gemm;
      gemm.input = input;
      gemm.output = output;
      gemm.transa = ops & 1;
      gemm.transb = ops & 2;
      gemm.bias = true;
      gemm.beta = ops == 3 ? 0.5f : 0.0f;
      const Inputs inputs = make_inputs(gemm, seed++);
      const Reference expected = reference(gemm, inputs);
      check_close(run_on_device(gemm, inputs), expected.values, expected.magnitude, output, 1e-6, gemm.label());
    }
  }
}

BOOST_AUTO_TEST_CASE(fast_tf32_rounds_fp32_inputs_to_ten_mantissa_bits) {
  GemmCase gemm;
  gemm.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  gemm.m = 33;
  gemm.n = 9;
  gemm.k = 129;
  const Inputs inputs = make_inputs(gemm, 300);
  const Reference expected = reference(gemm, inputs);
  const std::vector<float> got = run_on_device(gemm, inputs);
  check_close(got, expected.values, expected.magnitude, DType::F32, 0x1p-9, gemm.label() + " tf32");
  // 1 + 2^-12 is 1 in TF32: the product of a 1x1x1 GEMM shows the rounding.
  GemmCase one;
  one.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  one.m = one.n = one.k = 1;
  one.pad = 0;
  Inputs exact = make_inputs(one, 301);
  exact.a.values = {1.0f + 0x1p-12f};
  exact.b.values = {1.0f};
  BOOST_TEST(run_on_device(one, exact)[0] == 1.0f);
  one.compute = CUBLAS_COMPUTE_32F;
  BOOST_TEST(run_on_device(one, exact)[0] == 1.0f + 0x1p-12f);
}

BOOST_AUTO_TEST_CASE(unsupported_combinations_get_no_algorithm) {
  struct Combination {
    const char* what;
    cublasComputeType_t compute;
    cudaDataType_t scale, a, b, cd;
  };
  const Combination unsupported[] = {
      {"fp16 in, bf16 out", CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16BF},
      {"bf16 in, fp16 out", CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F},
      {"fp32 in, bf16 out", CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF},
      {"bf16 A, fp16 B", CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F},
      {"tf32 with bf16", CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F},
      {"fp16 scale", CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F},
      {"fp16 compute", CUBLAS_COMPUTE_16F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F},
      {"fp64", CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F},
  };
  for (const Combination& combination : unsupported) {
    Desc desc(combination.compute, combination.scale);
    Preference preference;
    const HeuristicAnswer answer = ask_heuristic(combination.a, combination.b, combination.cd, desc, preference);
    BOOST_TEST(answer.status == CUBLAS_STATUS_NOT_SUPPORTED, combination.what);
    BOOST_TEST(answer.found == 0, combination.what);
  }
  // The supported ones, for contrast.
  for (const auto& [input, output] : kTypeCombinations) {
    Desc desc;
    Preference preference;
    const HeuristicAnswer answer = ask_heuristic(cuda_type(input), cuda_type(input), cuda_type(output), desc, preference);
    BOOST_TEST(answer.status == CUBLAS_STATUS_SUCCESS);
    BOOST_TEST(answer.found == 1);
  }
}

BOOST_AUTO_TEST_CASE(unsupported_epilogues_and_bias_types_get_no_algorithm) {
  for (cublasLtEpilogue_t epilogue : {CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_BGRADB}) {
    Desc desc;
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    Preference preference;
    const HeuristicAnswer answer = ask_heuristic(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, desc, preference);
    BOOST_TEST(answer.status == CUBLAS_STATUS_NOT_SUPPORTED, "epilogue " << epilogue);
    BOOST_TEST(answer.found == 0);
  }
  // The bias has D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): an fp32 bias with a
  // bf16 output is not a documented combination; stating D's own type is.
  for (const auto& [bias_type, status] : {std::pair{CUDA_R_32F, CUBLAS_STATUS_NOT_SUPPORTED},
                                          std::pair{CUDA_R_16BF, CUBLAS_STATUS_SUCCESS}}) {
    Desc desc;
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(bias_type));
    Preference preference;
    BOOST_TEST(ask_heuristic(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, desc, preference).status == status);
  }
}

BOOST_AUTO_TEST_CASE(alignment_preferences) {
  // Promising the element size (a row-offset view) still gets an algorithm; less cannot.
  for (const auto& [type, promise, status] :
       {std::tuple{CUDA_R_16BF, 2u, CUBLAS_STATUS_SUCCESS}, std::tuple{CUDA_R_16F, 4u, CUBLAS_STATUS_SUCCESS},
        std::tuple{CUDA_R_32F, 4u, CUBLAS_STATUS_SUCCESS}, std::tuple{CUDA_R_32F, 2u, CUBLAS_STATUS_NOT_SUPPORTED},
        std::tuple{CUDA_R_16BF, 1u, CUBLAS_STATUS_NOT_SUPPORTED}}) {
    Desc desc;
    Preference preference;
    preference.set_all_alignments(promise);
    const HeuristicAnswer answer = ask_heuristic(type, type, type, desc, preference);
    BOOST_TEST(answer.status == status, "type " << type << " alignment " << promise);
    BOOST_TEST(answer.found == (status == CUBLAS_STATUS_SUCCESS ? 1 : 0));
  }
}

BOOST_AUTO_TEST_CASE(an_algorithm_needs_the_alignment_it_was_chosen_for) {
  // Chosen for 16-byte aligned pointers (the default promise is 256), then called with A one
  // bf16 element in: a real kernel with vector loads could fault, the emulator refuses.
  const int64_t m = 8, n = 8, k = 8;
  DeviceBuffer a((m * k + 1) * 2), b(k * n * 2), d(m * n * 2);
  const void* a_offset = static_cast<const char*>(a.data) + 2;
  Handle handle;
  Desc desc;
  Layout layout_a(CUDA_R_16BF, m, k, m), layout_b(CUDA_R_16BF, k, n, k), layout_d(CUDA_R_16BF, m, n, m);
  Stream stream;
  const float alpha = 1.0f, beta = 0.0f;
  for (const auto& [promise, status] : {std::pair{16u, CUBLAS_STATUS_INVALID_VALUE}, std::pair{2u, CUBLAS_STATUS_SUCCESS}}) {
    Preference preference;
    preference.set_all_alignments(promise);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    BOOST_REQUIRE_EQUAL(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, layout_a.layout, layout_b.layout,
                                                       layout_d.layout, layout_d.layout, preference.preference, 1,
                                                       &result, &found),
                        CUBLAS_STATUS_SUCCESS);
    BOOST_TEST(cublasLtMatmul(handle.handle, desc.desc, &alpha, a_offset, layout_a.layout, b.data, layout_b.layout,
                              &beta, d.data, layout_d.layout, d.data, layout_d.layout, &result.algo, nullptr, 0,
                              stream.handle) == status,
               "promised " << promise);
  }
  stream.synchronize();
}

BOOST_AUTO_TEST_CASE(bad_shapes_and_leading_dimensions_are_invalid_values) {
  Handle handle;
  Desc desc;
  Preference preference;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  {  // op(A) is 8 x 6 but op(B) is 7 x 8: k disagrees
    Layout a(CUDA_R_32F, 8, 6, 8), b(CUDA_R_32F, 7, 8, 7), cd(CUDA_R_32F, 8, 8, 8);
    BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, a.layout, b.layout, cd.layout, cd.layout,
                                              preference.preference, 1, &result, &found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // ld less than the rows of a column-major matrix
    Layout a(CUDA_R_32F, 8, 6, 7), b(CUDA_R_32F, 6, 8, 6), cd(CUDA_R_32F, 8, 8, 8);
    BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, a.layout, b.layout, cd.layout, cd.layout,
                                              preference.preference, 1, &result, &found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // C and D of different shapes
    Layout a(CUDA_R_32F, 8, 6, 8), b(CUDA_R_32F, 6, 8, 6), c(CUDA_R_32F, 8, 7, 8), d(CUDA_R_32F, 8, 8, 8);
    BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, a.layout, b.layout, c.layout, d.layout,
                                              preference.preference, 1, &result, &found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // no algorithms requested, or a destroyed layout
    Layout a(CUDA_R_32F, 8, 6, 8), b(CUDA_R_32F, 6, 8, 6), cd(CUDA_R_32F, 8, 8, 8);
    BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, a.layout, b.layout, cd.layout, cd.layout,
                                              preference.preference, 0, &result, &found) == CUBLAS_STATUS_INVALID_VALUE);
    BOOST_TEST(cublasLtMatmulAlgoGetHeuristic(handle.handle, desc.desc, a.layout, b.layout, cd.layout, nullptr,
                                              preference.preference, 1, &result, &found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  // Layouts other than column-major and unbatched are not emulated.
  Layout layout(CUDA_R_32F, 4, 4, 4);
  const int32_t row_order = CUBLASLT_ORDER_ROW, batch = 2, one = 1;
  BOOST_TEST(cublasLtMatrixLayoutSetAttribute(layout.layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &row_order,
                                              sizeof(row_order)) == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(cublasLtMatrixLayoutSetAttribute(layout.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                              sizeof(batch)) == CUBLAS_STATUS_NOT_SUPPORTED);
  BOOST_TEST(cublasLtMatrixLayoutSetAttribute(layout.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &one,
                                              sizeof(one)) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasLtMatrixLayoutSetAttribute(layout.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &one,
                                              sizeof(int64_t)) == CUBLAS_STATUS_INVALID_VALUE);  // wrong size
}

BOOST_AUTO_TEST_CASE(attributes_read_back) {
  Desc desc;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  int32_t transa = -1;
  size_t written = 0;
  BOOST_TEST(cublasLtMatmulDescGetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa),
                                            &written) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(transa == CUBLAS_OP_T);
  BOOST_TEST(written == sizeof(int32_t));
  BOOST_TEST(cublasLtMatmulDescGetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, nullptr, 0, &written) ==
             CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(written == sizeof(void*));
  Layout layout(CUDA_R_16BF, 3, 4, 5);
  int64_t ld = 0;
  BOOST_TEST(cublasLtMatrixLayoutGetAttribute(layout.layout, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld), &written) ==
             CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(ld == 5);
  Preference preference;
  uint32_t alignment = 0;
  BOOST_TEST(cublasLtMatmulPreferenceGetAttribute(preference.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &alignment, sizeof(alignment), &written) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(alignment == 256u);  // the documented default
  BOOST_TEST(std::string(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
  BOOST_TEST(!std::string(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).empty());
}

// ---- deferred execution and operand checks ------------------------------------------------------

struct SmallProblem {
  static constexpr int64_t kSize = 4;
  SmallProblem() {
    std::vector<float> ones(kSize * kSize, 1.0f);
    encode(ones, DType::F32, a.data);
    encode(ones, DType::F32, b.data);
    encode(std::vector<float>(kSize * kSize, -7.0f), DType::F32, d.data);
  }
  cublasStatus_t run(const void* a_data, const void* alpha_value, const void* beta_value) {
    return cublasLtMatmul(handle.handle, desc.desc, alpha_value, a_data, layout.layout, b.data, layout.layout,
                          beta_value, d.data, layout.layout, d.data, layout.layout, nullptr, nullptr, 0,
                          stream.handle);
  }
  float d_at(size_t index) const { return static_cast<const float*>(d.data)[index]; }
  DeviceBuffer a{kSize * kSize * sizeof(float)}, b{kSize * kSize * sizeof(float)}, d{kSize * kSize * sizeof(float)};
  Handle handle;
  Desc desc;
  Layout layout{CUDA_R_32F, kSize, kSize, kSize};
  Stream stream;
};

BOOST_AUTO_TEST_CASE(the_product_runs_when_the_stream_is_synchronised) {
  SmallProblem problem;
  const float alpha = 1.0f, beta = 0.0f;
  BOOST_REQUIRE_EQUAL(problem.run(problem.a.data, &alpha, &beta), CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(problem.d_at(0) == -7.0f);  // queued, not run: a host read now sees the old D
  problem.stream.synchronize();
  BOOST_TEST(problem.d_at(0) == 4.0f);
}

BOOST_AUTO_TEST_CASE(host_alpha_is_read_at_the_call_device_alpha_when_it_runs) {
  SmallProblem problem;
  float alpha = 2.0f, beta = 0.0f;
  BOOST_REQUIRE_EQUAL(problem.run(problem.a.data, &alpha, &beta), CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;  // too late: host pointer mode copied 2
  problem.stream.synchronize();
  BOOST_TEST(problem.d_at(0) == 8.0f);

  const int32_t device_mode = CUBLASLT_POINTER_MODE_DEVICE;
  problem.desc.set(CUBLASLT_MATMUL_DESC_POINTER_MODE, device_mode);
  DeviceBuffer scalars(2 * sizeof(float));
  float* device_alpha = static_cast<float*>(scalars.data);
  device_alpha[0] = 3.0f;
  device_alpha[1] = 0.0f;
  BOOST_REQUIRE_EQUAL(problem.run(problem.a.data, &device_alpha[0], &device_alpha[1]), CUBLAS_STATUS_SUCCESS);
  device_alpha[0] = 5.0f;  // in time: the device reads it when the product runs
  problem.stream.synchronize();
  BOOST_TEST(problem.d_at(0) == 20.0f);
}

BOOST_AUTO_TEST_CASE(operands_a_gpu_cannot_read_are_invalid_values) {
  SmallProblem problem;
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<float> pageable(SmallProblem::kSize * SmallProblem::kSize, 1.0f);
  BOOST_TEST(problem.run(pageable.data(), &alpha, &beta) == CUBLAS_STATUS_INVALID_VALUE);
  void* freed = nullptr;
  BOOST_REQUIRE(cudaMalloc(&freed, pageable.size() * sizeof(float)) == cudaSuccess);
  BOOST_REQUIRE(cudaFree(freed) == cudaSuccess);
  BOOST_TEST(problem.run(freed, &alpha, &beta) == CUBLAS_STATUS_INVALID_VALUE);
  // Nothing was queued, and the device is not faulted.
  problem.stream.synchronize();
  BOOST_TEST(problem.d_at(0) == -7.0f);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  // Pinned host memory: a GPU would read it across the bus (UVA); the emulator takes it only when
  // allocated with cudaHostAllocMapped (docs/emulated-device.md), else it is a host buffer
  // passed where a device one was meant.
  void* pinned = nullptr;
  BOOST_REQUIRE(cudaMallocHost(&pinned, pageable.size() * sizeof(float)) == cudaSuccess);
  std::memcpy(pinned, pageable.data(), pageable.size() * sizeof(float));
  BOOST_TEST(problem.run(pinned, &alpha, &beta) == CUBLAS_STATUS_INVALID_VALUE);
  cudaFreeHost(pinned);
  void* mapped = nullptr;
  BOOST_REQUIRE(cudaHostAlloc(&mapped, pageable.size() * sizeof(float), cudaHostAllocMapped) == cudaSuccess);
  std::memcpy(mapped, pageable.data(), pageable.size() * sizeof(float));
  BOOST_TEST(problem.run(mapped, &alpha, &beta) == CUBLAS_STATUS_SUCCESS);
  problem.stream.synchronize();
  BOOST_TEST(problem.d_at(0) == 4.0f);
  cudaFreeHost(mapped);
}

BOOST_AUTO_TEST_CASE(destroyed_handles_are_refused) {
  SmallProblem problem;
  const float alpha = 1.0f, beta = 0.0f;
  BOOST_TEST(cublasLtMatmul(nullptr, problem.desc.desc, &alpha, problem.a.data, problem.layout.layout, problem.b.data,
                            problem.layout.layout, &beta, problem.d.data, problem.layout.layout, problem.d.data,
                            problem.layout.layout, nullptr, nullptr, 0, problem.stream.handle) ==
             CUBLAS_STATUS_NOT_INITIALIZED);
  BOOST_TEST(cublasLtMatmul(problem.handle.handle, nullptr, &alpha, problem.a.data, problem.layout.layout,
                            problem.b.data, problem.layout.layout, &beta, problem.d.data, problem.layout.layout,
                            problem.d.data, problem.layout.layout, nullptr, nullptr, 0, problem.stream.handle) ==
             CUBLAS_STATUS_INVALID_VALUE);
}

BOOST_AUTO_TEST_CASE(a_large_product_is_fast_enough) {
  // The sizes the model tests reach (a vocabulary projection): well under a second.
  GemmCase gemm;
  gemm.input = gemm.output = DType::BF16;
  gemm.transb = true;
  gemm.m = 512;
  gemm.n = 64;
  gemm.k = 2048;
  gemm.pad = 0;
  const Inputs inputs = make_inputs(gemm, 400);
  const Reference expected = reference(gemm, inputs);
  check_close(run_on_device(gemm, inputs), expected.values, expected.magnitude, gemm.output, 1e-6, gemm.label());
}

BOOST_AUTO_TEST_SUITE_END()
