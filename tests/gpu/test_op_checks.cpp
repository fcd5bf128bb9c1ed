// The op-check table of `zerotune selftest` (backend/op_checks.h) on the CUDA backend: every op
// in every dtype within its bound of the CPU backend, and a perturbed result is caught.
#include <boost/test/unit_test.hpp>

#include "backend/op_checks.h"
#include "gpu_test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

BOOST_AUTO_TEST_SUITE(op_checks)

BOOST_AUTO_TEST_CASE(every_op_matches_the_cpu_backend) {
  const std::vector<OpCheckResult> results = run_op_checks(gpu(), cpu());
  BOOST_TEST(results.size() >= 50u);  // 18 ops, most in three dtypes
  for (const OpCheckResult& result : results)
    BOOST_TEST(result.ok, result.op << " " << dtype_name(result.dtype) << ": worst " << result.worst << " > bound "
                                    << result.bound << " " << result.detail);
}

BOOST_AUTO_TEST_CASE(a_wrong_result_is_caught) {
  const std::vector<OpCheckResult> results =
      run_op_checks(gpu(), cpu(), [](const std::string& op, DType dtype) { return op == "rmsnorm" && dtype == DType::BF16; });
  for (const OpCheckResult& result : results)
    BOOST_TEST(result.ok == !(result.op == "rmsnorm" && result.dtype == DType::BF16), result.op << " " << dtype_name(result.dtype));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
