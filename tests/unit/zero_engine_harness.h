// A ZeRO engine on the CPU backend driven as the model drives it, for the tests of ZeRO-Offload's
// update paths (test_update_per_bucket.cpp, test_offload_ratio.cpp): one rank, three units of both
// parameter groups, forward 0..2 and backward 2..0 with each unit's gradient written before
// gradients_ready.
#pragma once
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
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

namespace zero_harness {

// Unit u holds "w<u>" [rows, 4] (weight decay) and "n<u>" [rows] (none).
constexpr int kUnits = 3;
constexpr int64_t kRows[kUnits] = {5, 3, 7};

inline std::string unit_name(const char* prefix, int unit) {  // appended piece by piece: GCC 12 warns (-Wrestrict) on "w" + s
  std::string name(prefix);
  name += std::to_string(unit);
  return name;
}

inline std::vector<zt::ParamSpec> specs() {
  std::vector<zt::ParamSpec> all;
  for (int u = 0; u < kUnits; ++u) {
    all.emplace_back(unit_name("w", u), std::vector<int64_t>{kRows[u], 4}, zt::ParamRole::Linear, u, "", u);
    all.emplace_back(unit_name("n", u), std::vector<int64_t>{kRows[u]}, zt::ParamRole::NormWeight, u, "", u);
  }
  return all;
}

inline zt::OptimizerConfig adamw() {
  zt::OptimizerConfig config;
  config.type = "adamw";
  config.lr = 0.01;
  config.weight_decay = 0.1;
  return config;
}

// Stage 2 with the optimizer offloaded (the tests change what they need).
inline zt::ZeroConfig offloaded_stage2() {
  zt::ZeroConfig zero;
  zero.stage = 2;
  zero.offload_optimizer_device = "cpu";
  return zero;
}

using Params = std::map<std::string, std::vector<float>>;

// One rank's engine and store over `specs()` under `zero`.
struct Trainer {
  explicit Trainer(const zt::ZeroConfig& zero_config, const zt::OptimizerConfig& config = adamw(),
                   zt::DType dtype = zt::DType::F32)
      : backend(zt::make_cpu_backend()), comm(zt::make_null_communicator(0, 1)), zero(zero_config) {
    const std::unique_ptr<zt::Optimizer> optimizer = zt::make_optimizer(config);
    const zt::StoreResidency residency = zt::zero_store_residency(zero, 1, *optimizer);
    store = std::make_unique<zt::ParamStore>(*backend, specs(), std::vector<bool>(specs().size(), true), 1, dtype,
                                             residency);
    engine = std::make_unique<zt::ZeroEngine>(*backend, *comm, *store, zero, config, dtype);
    for (int u = 0; u < kUnits; ++u) {  // loaded unit by unit, as the trainer does (stage 3 holds none at first)
      if (!residency.params) store->commit_unit_params(u);
      for (const zt::ParamSpec& spec : specs()) {
        if (spec.unit != u) continue;
        std::vector<float> values(static_cast<size_t>(spec.numel()));
        for (size_t i = 0; i < values.size(); ++i)
          values[i] = static_cast<float>(0.3 * std::sin(0.7 * static_cast<double>(i) + spec.name[1]));
        store->write_param(spec.name, values.data());
      }
      engine->init_unit_from_store(u);
    }
    engine->finish_init();
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

  // Every parameter as fp32 (stage 3: gathered first).
  Params params() const {
    engine->gather_full_params();
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

inline Params gradients(const Params& params, int64_t t) {
  Params grads;
  for (const auto& [name, p] : params) {
    std::vector<float> g(p.size());
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = p[i] - static_cast<float>(std::cos(0.3 * static_cast<double>(i) + static_cast<double>(t) + name[1]));
    grads[name] = std::move(g);
  }
  return grads;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A Trainer under `zero` must not start: its error names `feature` (the flag or key) and `words`.
inline void check_refused(const zt::ZeroConfig& zero, const zt::OptimizerConfig& config, zt::DType dtype,
                          const std::string& feature, const std::string& words) {
  try {
    Trainer trainer(zero, config, dtype);
  } catch (const zt::Error& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find(feature) != std::string::npos, message);
    BOOST_TEST(message.find(words) != std::string::npos, message);
    return;
  }
  BOOST_FAIL(feature + " with " + words + " was not refused");
}

}  // namespace zero_harness
