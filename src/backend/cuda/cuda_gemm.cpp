// The CUDA backend's GEMM through cuBLASLt: fp32 (optionally TF32 tensor cores) for fp32
// views, bf16/fp16 tensor cores with fp32 accumulation for bf16/fp16 views, with a bf16/fp16
// or fp32 output. Row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T,
// i.e. cuBLASLt's "A" is our B and its "B" is our A. The descriptors and the algorithm the
// heuristic picks are cached per shape, dtype and pointer alignment.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace zt::cuda {

namespace {

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
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  auto tied() const {
    return std::tie(transpose_a, transpose_b, m, n, k, input, output, compute, align_a, align_b,
                    align_c);
  }
  bool operator<(const GemmKey& other) const { return tied() < other.tied(); }
};

struct GemmPlan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t layout_c = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

void destroy_plan(GemmPlan& plan) {
  // Tear-down: errors ignored (destructors must not throw).
  if (plan.layout_c) cublasLtMatrixLayoutDestroy(plan.layout_c);
  if (plan.layout_b) cublasLtMatrixLayoutDestroy(plan.layout_b);
  if (plan.layout_a) cublasLtMatrixLayoutDestroy(plan.layout_a);
  if (plan.operation) cublasLtMatmulDescDestroy(plan.operation);
}

}  // namespace

struct GemmPlans {
  std::map<GemmKey, GemmPlan> plans;
  ~GemmPlans() {
    for (auto& [key, plan] : plans) destroy_plan(plan);
  }
};

void GemmPlansDeleter::operator()(GemmPlans* plans) const { delete plans; }

std::unique_ptr<GemmPlans, GemmPlansDeleter> make_gemm_plans() {
  return std::unique_ptr<GemmPlans, GemmPlansDeleter>(new GemmPlans());
}

namespace {

// Builds the descriptors for `key` and asks the heuristic for the best algorithm.
GemmPlan make_plan(cublasLtHandle_t handle, const GemmKey& key, const char* description) {
  GemmPlan plan;
  try {
    const cublasOperation_t op_a = key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // our B
    const cublasOperation_t op_b = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // our A
    ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.operation, key.compute, CUDA_R_32F));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                   &op_a, sizeof(op_a)));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                   &op_b, sizeof(op_b)));
    const cudaDataType_t input = cuda_type(key.input), output = cuda_type(key.output);
    const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n);
    const auto k = static_cast<uint64_t>(key.k);
    // Column-major shapes: our B[K,N] row-major is N x K (ld N); B[N,K] is K x N (ld K).
    if (key.transpose_b) {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout_a, input, k, n, key.k));
    } else {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout_a, input, n, k, key.n));
    }
    // Our A[M,K] row-major is K x M (ld K); A[K,M] is M x K (ld M).
    if (key.transpose_a) {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout_b, input, m, k, key.m));
    } else {
      ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout_b, input, k, m, key.k));
    }
    // Our C[M,N] row-major is N x M (ld N).
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout_c, output, n, m, key.n));

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
    try {
      ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
      for (const auto& [attribute, bytes] : alignments) {
        ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes,
                                                             sizeof(bytes)));
      }
      ZT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan.operation, plan.layout_a,
                                                     plan.layout_b, plan.layout_c, plan.layout_c,
                                                     preference, 1, &result, &found));
    } catch (...) {
      cublasLtMatmulPreferenceDestroy(preference);
      throw;
    }
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    ZT_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for ", description);
    plan.algorithm = result.algo;
  } catch (...) {
    destroy_plan(plan);
    throw;
  }
  return plan;
}

}  // namespace

void CudaBackendImpl::matmul(Tensor c, Tensor a, bool transpose_a, Tensor b, bool transpose_b,
                             float alpha, float beta) {
  const char* op = "matmul";
  expect_device_float(op, "a", a);
  expect_device_float(op, "b", b);
  expect_device_float(op, "c", c);
  expect_same_dtype(op, "b", b, "a", a);
  ZT_CHECK(c.dtype == a.dtype || c.dtype == DType::F32, "matmul: c ", c.describe(),
           " must have the dtype of a ", a.describe(), " or be fp32");
  const GemmDims dims = matmul_dims(c, a, transpose_a, b, transpose_b);
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no products: C = beta * C
    if (beta == 0.0f) {
      fill(c, 0.0f);
    } else {
      scale(c, beta);
    }
    return;
  }
  GemmKey key;
  key.transpose_a = transpose_a;
  key.transpose_b = transpose_b;
  key.m = m;
  key.n = n;
  key.k = k;
  key.input = a.dtype;
  key.output = c.dtype;
  key.compute = a.dtype == DType::F32 && options_.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                             : CUBLAS_COMPUTE_32F;
  key.align_a = alignment_of(a.data);
  key.align_b = alignment_of(b.data);
  key.align_c = alignment_of(c.data);
  auto cached = gemm_plans_->plans.find(key);
  if (cached == gemm_plans_->plans.end()) {
    const std::string description = cat("c ", c.describe(), " = a", transpose_a ? "^T " : " ",
                                        a.describe(), " x b", transpose_b ? "^T " : " ",
                                        b.describe());
    cached = gemm_plans_->plans.emplace(key, make_plan(lt_handle_, key, description.c_str())).first;
  }
  const GemmPlan& plan = cached->second;
  ZT_CUBLAS_CHECK(cublasLtMatmul(lt_handle_, plan.operation, &alpha, b.data, plan.layout_a, a.data,
                                 plan.layout_b, &beta, c.data, plan.layout_c, c.data,
                                 plan.layout_c, &plan.algorithm, gemm_workspace_,
                                 kGemmWorkspaceBytes, stream_));
}

}  // namespace zt::cuda
