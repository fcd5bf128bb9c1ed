// ZeRO-Offload's per-bucket update (--update-per-bucket, docs/zero-offload.md) through the ZeRO
// engine on the CPU backend, one rank (a bucket per unit), three units, both parameter groups,
// AdamW: the engine driven as the model drives it (forward 0..2, backward 2..0 with each unit's
// gradient written before gradients_ready). Against the ordinary update after backward:
//  - finite steps: the parameters bit for bit;
//  - a step with a NaN in "w1"'s gradient: unit 1's slice of the weight-decay group ("w1") left
//    unchanged, the rest (its no-decay slice "n1" too) updated exactly as the ordinary update
//    updates them from the same finite gradients (element-wise AdamW);
//  - the refusals: fp16, and an optimizer that is not element-wise (Lamb).
// The whole-run checks (stages 2 and 3, one and two ranks, the emulated device) are in
// tests/mpi/offload_dpu_checks.py.
#include <boost/test/unit_test.hpp>

#include <limits>
#include <string>

#include "core/error.h"
#include "zero_engine_harness.h"

using namespace zero_harness;

namespace {

Trainer make_trainer(bool per_bucket, const zt::OptimizerConfig& config = adamw(), zt::DType dtype = zt::DType::F32) {
  zt::ZeroConfig zero = offloaded_stage2();
  zero.update_per_bucket = per_bucket;
  return Trainer(zero, config, dtype);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(update_per_bucket)

BOOST_AUTO_TEST_CASE(bit_identical_and_a_non_finite_unit_left_unchanged) {
  Trainer ordinary = make_trainer(false), per_bucket = make_trainer(true);
  for (int64_t t = 1; t <= 3; ++t) {  // finite steps: the same bits
    const Params grads = gradients(ordinary.params(), t);
    BOOST_TEST(ordinary.step(t, grads));
    BOOST_TEST(per_bucket.step(t, grads));
    for (const auto& [name, p] : ordinary.params())
      BOOST_TEST(same_bits(per_bucket.params().at(name), p), "step " << t << ": " << name << " bit-identical");
  }
  // A NaN in w1's gradient: the step is not finite; unit 1's decay-group slice (w1) stays, the
  // rest takes the update the ordinary step makes from the same (finite) gradients.
  const Params before = per_bucket.params();
  const Params finite = gradients(before, 4);
  Params poisoned = finite;
  poisoned.at("w1")[2] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(!per_bucket.step(4, poisoned));
  BOOST_TEST(ordinary.step(4, finite));
  const Params after = per_bucket.params(), expected = ordinary.params();
  for (const auto& [name, p] : after) {
    const bool bad_unit = name == "w1";
    BOOST_TEST(same_bits(p, bad_unit ? before.at(name) : expected.at(name)),
               name << (bad_unit ? " unchanged" : " updated as the ordinary step"));
  }
  BOOST_TEST(!same_bits(after.at("w0"), before.at("w0")));  // (an update happened at all)
}

BOOST_AUTO_TEST_CASE(refused_where_a_bucket_cannot_be_updated_alone) {
  zt::ZeroConfig per_bucket = offloaded_stage2();
  per_bucket.update_per_bucket = true;
  auto refused = [&](const zt::OptimizerConfig& config, zt::DType dtype, const std::string& words) {
    check_refused(per_bucket, config, dtype, "--update-per-bucket", words);
  };
  refused(adamw(), zt::DType::F16, "fp16");
  zt::OptimizerConfig lamb = adamw();
  lamb.type = "lamb";
  refused(lamb, zt::DType::F32, "lamb");
}

BOOST_AUTO_TEST_SUITE_END()
