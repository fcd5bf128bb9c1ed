// The CUDA backend's GEMM through cuBLASLt: fp32 (optionally TF32 tensor cores) for fp32
// views, bf16/fp16 tensor cores with fp32 accumulation for bf16/fp16 views, with a bf16/fp16
// or fp32 output; matmul_bias adds a linear layer's bias in cuBLASLt's epilogue. Row-major
// C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, i.e. cuBLASLt's "A" is
// our B and its "B" is our A. The operation descriptor and the algorithm the heuristic picks
// are cached per dtype, epilogue, pointer alignment and BUCKETED shape: each dimension rounded up
// to 1, 1.25, 1.5 or 1.75 times a power of two (see bucket()), so that a run whose sequence
// length changes every step (batches pad to their longest sample) asks the heuristic a few times
// per layer, not once per length; the matrix layouts are made for the exact shape at each call
// (host-side descriptors, microseconds). A bucket's algorithm that cuBLASLt refuses for an exact
// shape is replaced by that shape's own (cached under the exact key). The cache holds at most
// kMaxPlans plans, the least recently used going first.
//
// The bias epilogue (CUBLASLT_EPILOGUE_BIAS) adds a vector whose length is the number of ROWS of
// the column-major D, broadcast over D's columns: D[i, j] += bias[i]. Our C[M,N] is D with N
// rows and M columns (ld N), so D[i, j] is our C[j, i] and the epilogue computes
// C[j, i] += bias[i] for every row j: bias[N] broadcast over our M rows, as matmul_bias says.
// Which bias dtypes cuBLASLt takes (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): the bias
// elements have D's type, the exceptions being integer (IMMA) and fp8 kernels, which we do not
// use. So fp32 D takes an fp32 bias, bf16 D a bf16 bias, fp16 D an fp16 bias, whatever the
// input dtype; a bias of another dtype (e.g. fp32 bias, bf16 output) is not a documented
// combination and goes through matmul + add_bias instead.
#include <cublasLt.h>

#include <cstdint>
#include <list>
#include <map>
#include <tuple>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace zt::cuda {

namespace {

// Bias views less aligned than this take the unfused path. cuBLASLt takes the bias alignment
// from the pointer at heuristic time (the plan key holds it), but other projects report
// misaligned-address faults of bias epilogues with 2- to 8-byte aligned biases; a bias at an
// odd offset of a flat parameter buffer is rare and add_bias handles any alignment.
constexpr uint32_t kMinBiasAlignment = 16;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: break;
  }
  fail("matmul: no cuBLAS type for ", dtype_name(dtype));
}

// The largest power of two (up to 256) that divides the address: cuBLASLt kernels that need
// more alignment than a view has (a row slice, an offset into a flat buffer) are excluded.
uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// Everything that determines the descriptors and the algorithm.
struct GemmKey {
  bool transpose_a = false, transpose_b = false;  // ours (row-major)
  int64_t m = 0, n = 0, k = 0;
  DType input = DType::F32, output = DType::F32;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  // DEFAULT: C = alpha op(A) op(B) + beta C. BIAS: + bias[N] in the output dtype.
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  uint32_t align_bias = 0;  // 0 without a bias
  auto tied() const {
    return std::tie(transpose_a, transpose_b, m, n, k, input, output, compute, epilogue, align_a,
                    align_b, align_c, align_bias);
  }
  bool operator<(const GemmKey& other) const { return tied() < other.tied(); }
};

// A dimension's bucket: the smallest of 1, 1.25, 1.5, 1.75 x 2^k (k >= 3) that holds it;
// dimensions up to 16 are their own bucket. At most a quarter above the dimension.
int64_t bucket(int64_t value) {
  if (value <= 16) return value;
  int64_t power = 8;
  while (power * 2 < value) power *= 2;  // power < value <= 2 power
  for (int64_t quarters = 5; quarters <= 8; ++quarters)
    if (power * quarters / 4 >= value) return power * quarters / 4;
  return 2 * power;
}

// The matrix layouts of one problem (made per call, destroyed after it).
struct GemmLayouts {
  cublasLtMatrixLayout_t a = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t b = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t c = nullptr;
  explicit GemmLayouts(const GemmKey& key);
  ~GemmLayouts() { destroy(); }
  GemmLayouts(const GemmLayouts&) = delete;
  GemmLayouts& operator=(const GemmLayouts&) = delete;
  void destroy() noexcept {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    a = b = c = nullptr;
  }
};

struct GemmPlan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  // False (and no descriptors) when cuBLASLt has no algorithm with the bias epilogue for the
  // key: cached too, so matmul_bias goes straight to its unfused path next time.
  bool has_algorithm = false;
};

void destroy_plan(GemmPlan& plan) {
  // Tear-down: errors ignored (destructors must not throw).
  if (plan.operation) cublasLtMatmulDescDestroy(plan.operation);
  plan = GemmPlan{};
}

GemmLayouts::GemmLayouts(const GemmKey& key) {
  try {
    const cudaDataType_t input = cuda_type(key.input), output = cuda_type(key.output);
    const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n);
    const auto k = static_cast<uint64_t>(key.k);
    // Column-major shapes: our B[K,N] row-major is N x K (ld N); B[N,K] is K x N (ld K).
    if (key.transpose_b) {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, input, k, n, key.k));
    } else {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, input, n, k, key.n));
    }
    // Our A[M,K] row-major is K x M (ld K); A[K,M] is M x K (ld M).
    if (key.transpose_a) {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, input, m, k, key.m));
    } else {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, input, k, m, key.k));
    }
    // Our C[M,N] row-major is N x M (ld N): the bias epilogue's vector has its N rows.
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, output, n, m, key.n));
  } catch (...) {
    destroy();
    throw;
  }
}

constexpr size_t kMaxPlans = 256;

}  // namespace

struct GemmPlans {
  std::list<std::pair<GemmKey, GemmPlan>> recent;  // most recently used first
  std::map<GemmKey, std::list<std::pair<GemmKey, GemmPlan>>::iterator> index;
  size_t heuristic_queries = 0;
  ~GemmPlans() {
    for (auto& [key, plan] : recent) destroy_plan(plan);
  }
  GemmPlan* find(const GemmKey& key) {
    auto found = index.find(key);
    if (found == index.end()) return nullptr;
    recent.splice(recent.begin(), recent, found->second);  // now the most recent
    return &found->second->second;
  }
  GemmPlan& insert(const GemmKey& key, GemmPlan plan) {
    if (recent.size() >= kMaxPlans) {
      destroy_plan(recent.back().second);
      index.erase(recent.back().first);
      recent.pop_back();
    }
    recent.emplace_front(key, plan);
    index[key] = recent.begin();
    return recent.front().second;
  }
};

void GemmPlansDeleter::operator()(GemmPlans* plans) const { delete plans; }

std::unique_ptr<GemmPlans, GemmPlansDeleter> make_gemm_plans() {
  return std::unique_ptr<GemmPlans, GemmPlansDeleter>(new GemmPlans());
}

namespace {

// Sets the bias pointer of a plan's operation: the heuristic reads its alignment, cublasLtMatmul
// the data (each call sets its own bias; cuBLASLt reads the descriptor when the call is queued).
void set_bias_pointer(cublasLtMatmulDesc_t operation, const void* bias) {
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                 &bias, sizeof(bias)));
}

// Builds the descriptors for `key` and asks the heuristic for the best algorithm. `bias` is a
// bias of the key's alignment (nullptr for the default epilogue). Without an algorithm: an
// error for a plain GEMM, a plan without one (has_algorithm false) for the bias epilogue.
GemmPlan make_plan(cublasLtHandle_t handle, const GemmKey& key, const void* bias,
                   const char* description) {
  GemmPlan plan;
  try {
    const cublasOperation_t op_a = key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // our B
    const cublasOperation_t op_b = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // our A
    ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.operation, key.compute, CUDA_R_32F));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                   &op_a, sizeof(op_a)));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                   &op_b, sizeof(op_b)));
    const cudaDataType_t output = cuda_type(key.output);
    const bool with_bias = key.epilogue == CUBLASLT_EPILOGUE_BIAS;
    if (with_bias) {
      ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                     &key.epilogue, sizeof(key.epilogue)));
      // The bias is in D's dtype (see the top of the file); stated rather than left to the
      // default, so the descriptor says what matmul_bias checked.
      const auto bias_type = static_cast<int32_t>(output);
      ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
      set_bias_pointer(plan.operation, bias);
    }
    const GemmLayouts layouts(key);  // the key's (bucketed) shape: what the heuristic picks for
    cublasLtMatmulPreference_t preference = nullptr;
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace = kGemmWorkspaceBytes;
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},  // cuBLASLt's A is our B
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c},
    };
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    try {
      ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
      for (const auto& [attribute, bytes] : alignments) {
        ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes,
                                                             sizeof(bytes)));
      }
      status = cublasLtMatmulAlgoGetHeuristic(handle, plan.operation, layouts.a, layouts.b, layouts.c,
                                              layouts.c, preference, 1, &result, &found);
    } catch (...) {
      cublasLtMatmulPreferenceDestroy(preference);
      throw;
    }
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    // cuBLASLt says "no kernel for this" with NOT_SUPPORTED or with zero results.
    const bool no_algorithm = status == CUBLAS_STATUS_NOT_SUPPORTED ||
                              (status == CUBLAS_STATUS_SUCCESS && found == 0);
    if (no_algorithm) {
      ZT_CHECK(with_bias, "matmul: cuBLASLt has no algorithm for ", description);
      destroy_plan(plan);  // has_algorithm false: matmul_bias falls back to matmul + add_bias
      return plan;
    }
    if (status != CUBLAS_STATUS_SUCCESS) {
      fail_cublas_call("cublasLtMatmulAlgoGetHeuristic", status, __FILE__, __LINE__);
    }
    plan.algorithm = result.algo;
    plan.has_algorithm = true;
  } catch (...) {
    destroy_plan(plan);
    throw;
  }
  return plan;
}

// matmul's dtype rules (matmul_bias's too): a and b one float dtype, c that dtype or fp32.
void expect_gemm_dtypes(const char* op, const Tensor& c, const Tensor& a, const Tensor& b) {
  expect_device_float(op, "a", a);
  expect_device_float(op, "b", b);
  expect_device_float(op, "c", c);
  expect_same_dtype(op, "b", b, "a", a);
  ZT_CHECK(c.dtype == a.dtype || c.dtype == DType::F32, op, ": c ", c.describe(),
           " must have the dtype of a ", a.describe(), " or be fp32");
}

}  // namespace

bool CudaBackendImpl::run_gemm(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b,
                               const GemmDims& dims, float alpha, float beta, Tensor bias) {
  GemmKey key;
  key.transpose_a = transpose_a;
  key.transpose_b = transpose_b;
  key.m = dims.m;
  key.n = dims.n;
  key.k = dims.k;
  key.input = a.dtype;
  key.output = c.dtype;
  key.compute = a.dtype == DType::F32 && options_.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                             : CUBLAS_COMPUTE_32F;
  key.align_a = alignment_of(a.data);
  key.align_b = alignment_of(b.data);
  key.align_c = alignment_of(c.data);
  if (!bias.empty()) {
    key.epilogue = CUBLASLT_EPILOGUE_BIAS;
    key.align_bias = alignment_of(bias.data);
  }
  const std::string description =
      cat("c ", c.describe(), " = a", transpose_a ? "^T " : " ", a.describe(), " x b", transpose_b ? "^T " : " ",
          b.describe(), bias.empty() ? std::string() : cat(" + bias ", bias.describe()));
  GemmKey bucketed = key;
  bucketed.m = bucket(key.m);
  bucketed.n = bucket(key.n);
  bucketed.k = bucket(key.k);
  const auto plan_for = [&](const GemmKey& plan_key) -> GemmPlan& {
    if (GemmPlan* cached = gemm_plans_->find(plan_key)) return *cached;
    ++gemm_plans_->heuristic_queries;
    return gemm_plans_->insert(plan_key, make_plan(lt_handle_, plan_key, bias.data, description.c_str()));
  };
  // An exact plan exists only where cuBLASLt refused the bucket's algorithm for this shape.
  GemmPlan* plan = gemm_plans_->find(key);
  if (!plan) plan = &plan_for(bucketed);
  if (!plan->has_algorithm) return false;  // only bias plans lack one (make_plan throws otherwise)
  const GemmLayouts layouts(key);
  const auto run = [&](const GemmPlan& with) {
    if (!bias.empty()) set_bias_pointer(with.operation, bias.data);
    return cublasLtMatmul(lt_handle_, with.operation, &alpha, b.data, layouts.a, a.data, layouts.b, &beta, c.data,
                          layouts.c, c.data, layouts.c, &with.algorithm, gemm_workspace_, kGemmWorkspaceBytes,
                          stream_);
  };
  cublasStatus_t status = run(*plan);
  const bool was_bucketed = bucketed.m != key.m || bucketed.n != key.n || bucketed.k != key.k;
  if ((status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) && was_bucketed &&
      plan != gemm_plans_->find(key)) {
    GemmPlan& exact = plan_for(key);  // this shape's own algorithm
    if (!exact.has_algorithm) return false;
    status = run(exact);
  }
  if (status != CUBLAS_STATUS_SUCCESS) fail_cublas_call("cublasLtMatmul", status, __FILE__, __LINE__);
  return true;
}

size_t CudaBackendImpl::gemm_plans_cached() const { return gemm_plans_->recent.size(); }
size_t CudaBackendImpl::gemm_heuristic_queries() const { return gemm_plans_->heuristic_queries; }

void CudaBackendImpl::matmul(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b,
                             float alpha, float beta) {
  expect_gemm_dtypes("matmul", c, a, b);
  const GemmDims dims = matmul_dims(c, a, transpose_a, b, transpose_b);
  if (dims.m == 0 || dims.n == 0) return;
  if (dims.k == 0) {  // no products: C = beta * C
    if (beta == 0.0f) {
      fill(c, 0.0f);
    } else {
      scale(c, beta);
    }
    return;
  }
  run_gemm(c, a, transpose_a, b, transpose_b, dims, alpha, beta, Tensor{});
}

void CudaBackendImpl::matmul_bias(Tensor c, Tensor a, Tensor b, Tensor bias) {
  if (bias.empty()) return matmul(c, a, false, b, true, 1.0f, 0.0f);
  const char* op = "matmul_bias";
  expect_gemm_dtypes(op, c, a, b);
  expect_device_float(op, "bias", bias);
  const GemmDims dims = matmul_dims(c, a, false, b, true, "matmul_bias");
  expect_shape(op, "bias", bias, {dims.n});
  // Fused: the bias in the output's dtype (what cuBLASLt documents, see the top of the file),
  // aligned, and a GEMM with products (K = 0 is a fill, not a cuBLASLt call).
  const bool fusable = dims.m > 0 && dims.n > 0 && dims.k > 0 && bias.dtype == c.dtype &&
                       alignment_of(bias.data) >= kMinBiasAlignment;
  if (fusable && run_gemm(c, a, false, b, true, dims, 1.0f, 0.0f, bias)) return;
  // Unfused, explicitly: a bias dtype other than the output's (fp32 bias with a bf16/fp16
  // output, 16-bit bias with an fp32 output), an unaligned bias view, K = 0, or no cuBLASLt
  // algorithm with the bias epilogue for this problem.
  matmul(c, a, false, b, true, 1.0f, 0.0f);
  add_bias(c, bias);
}

}  // namespace zt::cuda
