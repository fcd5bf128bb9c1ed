// The op checks: one table entry per Backend op (ggml's test-backend-ops idea), each running the
// op on small random inputs in a storage dtype on a backend under test and on the CPU reference,
// and comparing. `zerotune selftest` runs the table on the GPU of every rank of an allocation;
// the gpu tests run it on the CUDA backend (the emulated device in CI).
//
// Bound (as tests/gpu/gpu_test_util.h): |got - ref| <= rtol * (|ref| + rms(ref)) element-wise,
// rtol the op's fp32 bound raised to two units of roundoff of the storage dtype (bf16 2^-7,
// fp16 2^-10): both backends see the same inputs (random fp32 rounded to the dtype) and round
// each output once, so what differs is fp32 reassociation and the final rounding. Four units for
// the attention, whose tensor-core kernels round P and dS to the dtype before some of their
// products (see op_checks.cpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace zt {

struct OpCheckResult {
  std::string op;
  DType dtype = DType::F32;
  bool ok = false;
  double worst = 0.0;  // the largest |got - ref| / (|ref| + rms(ref)) over the outputs
  double bound = 0.0;  // rtol
  std::string detail;  // why it failed (the output and element), or an exception's message
};

// Every op in every storage dtype it takes (backend.h), on `backend` against `reference` (a CPU
// backend). `perturb(op, dtype)` true: the backend's outputs are altered before the comparison
// (a test hook: the failure path must be reachable).
std::vector<OpCheckResult> run_op_checks(Backend& backend, Backend& reference,
                                         const std::function<bool(const std::string& op, DType dtype)>& perturb = {});

}  // namespace zt
