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

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/null_communicator.h"
#include "core/error.h"
#include "model/param_store.h"
#include "optim/optimizer_config.h"
#include "zero/zero_engine.h"

namespace {

// Unit u holds "w<u>" [rows, 4] (weight decay) and "n<u>" [rows] (none).
constexpr int kUnits = 3;
constexpr int64_t kRows[kUnits] = {5, 3, 7};

std::string unit_name(const char* prefix, int unit) {  // appended piece by piece: GCC 12 warns (-Wrestrict) on "w" + s
  std::string name(prefix);
  name += std::to_string(unit);
  return name;
}

std::vector<zt::ParamSpec> specs() {
  std::vector<zt::ParamSpec> all;
  for (int u = 0; u < kUnits; ++u) {
    all.emplace_back(unit_name("w", u), std::vector<int64_t>{kRows[u], 4}, zt::ParamRole::Linear, u, "", u);
    all.emplace_back(unit_name("n", u), std::vector<int64_t>{kRows[u]}, zt::ParamRole::NormWeight, u, "", u);
  }
  return all;
}

zt::OptimizerConfig adamw() {
  zt::OptimizerConfig config;
  config.type = "adamw";
  config.lr = 0.01;
  config.weight_decay = 0.1;
  return config;
}

using Params = std::map<std::string, std::vector<float>>;

// One rank's engine and store over `specs()`, stage 2 with the optimizer offloaded.
struct Trainer {
  explicit Trainer(bool per_bucket, const zt::OptimizerConfig& config = adamw(), zt::DType dtype = zt::DType::F32)
      : backend(zt::make_cpu_backend()), comm(zt::make_null_communicator(0, 1)) {
    zero.stage = 2;
    zero.offload_optimizer_device = "cpu";
    zero.update_per_bucket = per_bucket;
    const std::unique_ptr<zt::Optimizer> optimizer = zt::make_optimizer(config);
    store = std::make_unique<zt::ParamStore>(*backend, specs(), std::vector<bool>(specs().size(), true), 1, dtype,
                                             zt::zero_store_residency(zero, 1, *optimizer));
    for (const zt::ParamSpec& spec : specs()) {
      std::vector<float> values = store->read_param(spec.name);
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>(0.3 * std::sin(0.7 * static_cast<double>(i) + spec.name[1]));
      store->write_param(spec.name, values.data());
    }
    engine = std::make_unique<zt::ZeroEngine>(*backend, *comm, *store, zero, config, dtype);
    engine->init_from_store();
  }

  // One step of update `t` with gradient `grads` (by name); returns whether the gradient was finite.
  bool step(int64_t t, const Params& grads) {
    const zt::OptimizerStep update{0.01, 1.0f, t, 1.0f};
    engine->begin_step(t);
    if (zero.update_per_bucket) engine->arm_bucket_update(update);
    engine->begin_micro_batch(true);
    for (int u = 0; u < kUnits; ++u) {
      engine->acquire(u, zt::UnitUse::Forward);
      engine->release(u);
    }
    for (int u = kUnits - 1; u >= 0; --u) {
      engine->acquire(u, zt::UnitUse::Backward);
      for (const char* prefix : {"w", "n"}) {
        const std::string name = unit_name(prefix, u);
        const std::vector<float>& g = grads.at(name);
        const int64_t n = static_cast<int64_t>(g.size());
        backend->copy(store->grad(name).reshaped({n}), zt::Tensor(const_cast<float*>(g.data()), zt::DType::F32, {n}));
      }
      engine->gradients_ready(u);
      engine->release(u);
    }
    engine->end_micro_batch();
    engine->reduce_gradients();
    const bool finite = !engine->check_gradients().overflow;
    if (finite)
      engine->apply_update(update);
    else
      engine->finish_delayed_update();  // as StepRunner does on a skipped step
    return finite;
  }

  Params params() const {
    Params all;
    for (const zt::ParamSpec& spec : specs()) all[spec.name] = store->read_param(spec.name);
    return all;
  }

  std::unique_ptr<zt::Backend> backend;
  std::unique_ptr<zt::Communicator> comm;
  zt::ZeroConfig zero;
  std::unique_ptr<zt::ParamStore> store;
  std::unique_ptr<zt::ZeroEngine> engine;
};

Params gradients(const Params& params, int64_t t) {
  Params grads;
  for (const auto& [name, p] : params) {
    std::vector<float> g(p.size());
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = p[i] - static_cast<float>(std::cos(0.3 * static_cast<double>(i) + static_cast<double>(t) + name[1]));
    grads[name] = std::move(g);
  }
  return grads;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(update_per_bucket)

BOOST_AUTO_TEST_CASE(bit_identical_and_a_non_finite_unit_left_unchanged) {
  Trainer ordinary(false), per_bucket(true);
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
  auto refused = [](const zt::OptimizerConfig& config, zt::DType dtype, const std::string& words) {
    try {
      Trainer trainer(true, config, dtype);
    } catch (const zt::Error& error) {
      const std::string message = error.what();
      BOOST_TEST(message.find("--update-per-bucket") != std::string::npos, message);
      BOOST_TEST(message.find(words) != std::string::npos, message);
      return;
    }
    BOOST_FAIL("--update-per-bucket with " + words + " was not refused");
  };
  refused(adamw(), zt::DType::F16, "fp16");
  zt::OptimizerConfig lamb = adamw();
  lamb.type = "lamb";
  refused(lamb, zt::DType::F32, "lamb");
}

BOOST_AUTO_TEST_SUITE_END()
