// Partial optimizer offload (zero_optimization.offload_optimizer.ratio < 1, DeepSpeed's
// ZeRO-Offload++ Twin-Flow; docs/zero-offload.md) through the ZeRO engine on the CPU backend at
// stage 3, one rank, three units of both parameter groups (zero_engine_harness.h):
//  - where the parts are: the group's first units whose slices fit in (1 - ratio) of the
//    partition stay on the device (partition_views' parts, in order), and the bytes the engine
//    reports move from the host to the device accordingly;
//  - trajectories: ratios 1, 0.5 and 0 and no offload at all give the same parameters bit for bit
//    (fp32 and bf16 compute: the device's and the host's AdamW are the same kernels here), and the
//    parts laid end to end are the whole partition's master (what a checkpoint saves);
//  - with --delayed-param-update too (the resident part's update delayed with the host's);
//  - the refusals: below stage 3, with --update-per-bucket, Lamb, and a ratio outside [0, 1].
// Whole runs (exact resume, a checkpoint resumed at another ratio, the emulated device's memory)
// are tests/mpi/offload_ratio_checks.py.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "zero_engine_harness.h"

using namespace zero_harness;

namespace {

zt::ZeroConfig stage3(double ratio, bool offload = true) {
  zt::ZeroConfig zero = offloaded_stage2();
  zero.stage = 3;
  zero.stage3_param_persistence_threshold = 0;  // every unit gathered and released
  if (!offload) zero.offload_optimizer_device = "none";
  zero.offload_optimizer_ratio = ratio;
  return zero;
}

// (begin, numel) of each part of a group's partition.
std::vector<std::pair<int64_t, int64_t>> parts_of(zt::ZeroEngine& engine, zt::ParamGroup group) {
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (const zt::ZeroEngine::PartitionViews& views : engine.partition_views())
    if (views.group == group)
      for (const zt::ZeroEngine::PartitionViews::Part& part : views.parts) parts.emplace_back(part.begin, part.master.numel());
  return parts;
}

using Parts = std::vector<std::pair<int64_t, int64_t>>;

}  // namespace

BOOST_AUTO_TEST_SUITE(offload_ratio)

BOOST_AUTO_TEST_CASE(the_first_units_stay_on_the_device) {
  Trainer half(stage3(0.5)), all(stage3(1.0)), none(stage3(0.0));
  // Units' ranges as the store pads them: decay ("w") 20, 12, 28 elements, no-decay ("n") 5, 3, 7,
  // each padded alike.
  const auto unit_numel = [&](zt::ParamGroup group, int u) { return half.store->unit_range(group, u).numel; };
  int64_t resident = 0, total = 0;
  for (const zt::ParamGroup group : {zt::ParamGroup::Decay, zt::ParamGroup::NoDecay}) {
    const int64_t first = unit_numel(group, 0), rest = unit_numel(group, 1) + unit_numel(group, 2);
    BOOST_REQUIRE(first <= (first + rest) / 2);        // unit 0 fits in half of the partition,
    BOOST_REQUIRE(first + unit_numel(group, 1) > (first + rest) / 2);  // units 0 and 1 do not
    BOOST_TEST((parts_of(*half.engine, group) == Parts{{0, first}, {first, rest}}));
    BOOST_TEST((parts_of(*all.engine, group) == Parts{{0, first + rest}}));
    BOOST_TEST((parts_of(*none.engine, group) == Parts{{0, first + rest}}));
    resident += first;
    total += first + rest;
  }
  // Master + AdamW's two moments of the resident elements, on the device; the host keeps the rest
  // and the gradient copy of the rest only.
  const zt::ZeroMemory m_half = half.engine->memory(), m_all = all.engine->memory(), m_none = none.engine->memory();
  BOOST_TEST(m_half.resident_optimizer == resident * 4 * 3);
  BOOST_TEST(m_all.resident_optimizer == 0);
  BOOST_TEST(m_none.resident_optimizer == total * 4 * 3);
  BOOST_TEST(m_all.host_bytes - m_half.host_bytes == resident * (4 * 3 + 4));
  BOOST_TEST(m_all.host_bytes == total * (4 * 3 + 4));
  BOOST_TEST(m_none.host_bytes == 0);
  BOOST_TEST(m_half.master_params == m_all.master_params);  // (where, not how much)
  BOOST_TEST(m_half.optimizer_state == m_all.optimizer_state);
}

BOOST_AUTO_TEST_CASE(trajectories_bit_identical_at_every_ratio) {
  for (const zt::DType dtype : {zt::DType::F32, zt::DType::BF16}) {
    Trainer reference(stage3(1.0), adamw(), dtype);
    Trainer half(stage3(0.5), adamw(), dtype), none(stage3(0.0), adamw(), dtype);
    Trainer resident(stage3(1.0, false), adamw(), dtype);  // no offload at all
    for (int64_t t = 1; t <= 3; ++t) {
      const Params grads = gradients(reference.params(), t);
      for (Trainer* trainer : {&reference, &half, &none, &resident}) BOOST_TEST(trainer->step(t, grads));
      const Params expected = reference.params();
      for (const auto& [label, trainer] : {std::pair<const char*, Trainer*>{"ratio 0.5", &half},
                                           {"ratio 0", &none}, {"no offload", &resident}})
        for (const auto& [name, p] : trainer->params())
          BOOST_TEST(same_bits(p, expected.at(name)),
                     zt::dtype_name(dtype) << " step " << t << ", " << label << ": " << name << " bit-identical");
    }
    // The parts end to end are the partition as one buffer holds it (the checkpoint's layout).
    for (const zt::ZeroEngine::PartitionViews& views : half.engine->partition_views()) {
      std::vector<float> joined;
      for (const zt::ZeroEngine::PartitionViews::Part& part : views.parts)
        joined.insert(joined.end(), part.master.f32(), part.master.f32() + part.master.numel());
      for (const zt::ZeroEngine::PartitionViews& whole : reference.engine->partition_views()) {
        if (whole.group != views.group) continue;
        const zt::Tensor master = whole.parts.at(0).master;
        BOOST_TEST(same_bits(joined, std::vector<float>(master.f32(), master.f32() + master.numel())),
                   "the master's parts joined");
      }
    }
  }
}

// With --delayed-param-update the resident part's update waits with the host's (from a copy of its
// gradients, which the next backward rewrites): ratio 0.5 and 0 follow ratio 1's delayed trajectory.
BOOST_AUTO_TEST_CASE(delayed_update_bit_identical_at_every_ratio) {
  auto delayed = [](double ratio) {
    zt::ZeroConfig zero = stage3(ratio);
    zero.delayed_update_after = 1;  // updates 2, 3, ... delayed
    return zero;
  };
  for (const zt::DType dtype : {zt::DType::F32, zt::DType::BF16}) {
    Trainer reference(delayed(1.0), adamw(), dtype), half(delayed(0.5), adamw(), dtype), none(delayed(0.0), adamw(), dtype);
    BOOST_TEST(half.engine->memory().gradients > reference.engine->memory().gradients);  // (the copy)
    // Gradients given, not taken at the parameters: nothing is read between the steps, so each
    // delayed update is still in flight while the next step's backward rewrites the gradients.
    const Params initial = reference.params();
    for (int64_t t = 1; t <= 4; ++t) {
      const Params grads = gradients(initial, t);
      for (Trainer* trainer : {&reference, &half, &none}) BOOST_TEST(trainer->step(t, grads));
    }
    const Params expected = reference.params();  // (completes the update in flight, as a checkpoint does)
    BOOST_TEST(!same_bits(expected.at("w0"), initial.at("w0")));
    for (const auto& [label, trainer] : {std::pair<const char*, Trainer*>{"ratio 0.5", &half}, {"ratio 0", &none}})
      for (const auto& [name, p] : trainer->params())
        BOOST_TEST(same_bits(p, expected.at(name)),
                   zt::dtype_name(dtype) << " delayed, " << label << ": " << name << " bit-identical after 4 steps");
  }
}

BOOST_AUTO_TEST_CASE(refused_where_the_parts_cannot_be_updated_apart) {
  auto refused = [](const zt::ZeroConfig& zero, const zt::OptimizerConfig& config, const std::string& words) {
    check_refused(zero, config, zt::DType::F32, "offload_optimizer.ratio", words);
  };
  zt::ZeroConfig stage2 = offloaded_stage2();
  stage2.offload_optimizer_ratio = 0.5;
  refused(stage2, adamw(), "stage 3");
  zt::ZeroConfig per_bucket = stage3(0.5);
  per_bucket.update_per_bucket = true;
  refused(per_bucket, adamw(), "--update-per-bucket");
  zt::OptimizerConfig lamb = adamw();
  lamb.type = "lamb";
  refused(stage3(0.5), lamb, "lamb");
  refused(stage3(1.5), adamw(), "[0, 1]");
  refused(stage3(-0.25), adamw(), "[0, 1]");
  Trainer ignored(stage3(0.5, false));  // without offload the ratio means nothing (ds_config notes it)
  BOOST_TEST(ignored.engine->memory().resident_optimizer == 0);
}

BOOST_AUTO_TEST_SUITE_END()
