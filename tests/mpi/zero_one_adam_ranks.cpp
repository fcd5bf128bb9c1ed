// An MPI program that trains a tiny problem with 0/1 Adam through the ZeRO engine on the CPU
// backend, for tests/mpi/zero_one_adam_oracle.py. Two trainable tensors, one per parameter
// group and both in unit 0 (so the rank-major exchange order is the natural one): "w" [16, 8]
// (weight decay) and "n" [64] (none; 16 elements a rank on 4 ranks: the store pads no slice). Rank r's gradient of update t is
//   g_r = (p_r - c_r) a + noise(r, t)   (c_r, a, noise: fixed functions of the element)
// of its own parameters p_r (which drift apart in 0/1 Adam's local steps), divided by W because
// zerotune sums gradients over ranks. Each rank writes OUT/rank<r>.json: its parameters after
// every update.
//   mpiexec -np W zt_zero_one_adam_ranks OUT STAGE OFFLOAD UPDATES VAR_FREEZE VAR_SCALER LOCAL_SCALER CLIPPER
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "model/param_store.h"
#include "optim/optimizer_config.h"
#include "zero/zero_engine.h"

namespace {

struct Tensor1 {
  std::string name;
  std::vector<int64_t> shape;
  zt::ParamRole role;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

const std::vector<Tensor1> kTensors = {{"w", {16, 8}, zt::ParamRole::Linear}, {"n", {64}, zt::ParamRole::NormWeight}};

float initial(int tensor, int64_t i) { return static_cast<float>(0.5 * std::sin(0.7 * static_cast<double>(i) + tensor)); }
float target(int tensor, int rank, int64_t i) {
  return static_cast<float>(std::cos(0.3 * static_cast<double>(i) + 1.1 * rank + tensor));
}
float curvature(int tensor, int64_t i) { return static_cast<float>(0.5 + 0.4 * std::sin(1.3 * static_cast<double>(i) + tensor)); }
float noise(int tensor, int rank, int64_t update, int64_t i) {
  return static_cast<float>(0.3 * std::sin(0.91 * static_cast<double>(i) + 2.3 * rank + 0.57 * static_cast<double>(update) + tensor));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    ZT_CHECK(argc == 9, "usage: zt_zero_one_adam_ranks OUT STAGE OFFLOAD UPDATES VAR_FREEZE VAR_SCALER LOCAL_SCALER CLIPPER");
    const std::string out = argv[1];
    zt::ZeroConfig zero;
    zero.stage = std::stoi(argv[2]);
    zero.offload_optimizer_device = std::stoi(argv[3]) ? "cpu" : "none";
    const int64_t updates = std::stoll(argv[4]);
    zt::OptimizerConfig config;
    config.type = "zerooneadam";
    config.lr = 0.05;
    config.beta1 = 0.9;
    config.beta2 = 0.99;
    config.eps = 1e-8;
    config.weight_decay = 0.01;
    config.var_freeze_step = std::stoll(argv[5]);
    config.var_update_scaler = std::stoll(argv[6]);
    config.local_step_scaler = std::stoll(argv[7]);
    config.local_step_clipper = std::stoll(argv[8]);
    config.comm_backend_name = "mpi";
    std::unique_ptr<zt::Communicator> comm = zt::make_mpi_communicator(MPI_COMM_WORLD);
    std::unique_ptr<zt::Backend> backend = zt::make_cpu_backend();
    const int world = comm->size(), rank = comm->rank();
    std::vector<zt::ParamSpec> specs;
    for (const Tensor1& tensor : kTensors) {
      zt::ParamSpec spec;
      spec.name = tensor.name;
      spec.shape = tensor.shape;
      spec.role = tensor.role;
      spec.unit = 0;
      specs.push_back(spec);
    }
    const std::unique_ptr<zt::Optimizer> optimizer = zt::make_optimizer(config);
    zt::ParamStore store(*backend, specs, {true, true}, world, zt::DType::F32,
                         zt::zero_store_residency(zero, world, *optimizer));
    for (size_t k = 0; k < kTensors.size(); ++k) {
      std::vector<float> values(static_cast<size_t>(kTensors[k].numel()));
      for (int64_t i = 0; i < kTensors[k].numel(); ++i) values[static_cast<size_t>(i)] = initial(static_cast<int>(k), i);
      store.write_param(kTensors[k].name, values.data());
    }
    for (zt::ParamGroup group : {zt::ParamGroup::Decay, zt::ParamGroup::NoDecay})
      ZT_CHECK(store.group(group).numel == kTensors[group == zt::ParamGroup::Decay ? 0 : 1].numel(),
               "the store pads the groups: the oracle's order would not be the exchange's");
    zt::ZeroEngine engine(*backend, *comm, store, zero, config, zt::DType::F32, comm.get());
    engine.init_from_store();
    nlohmann::json record = {{"rank", rank}, {"world", world}, {"updates", nlohmann::json::array()}};
    for (int64_t t = 1; t <= updates; ++t) {
      engine.begin_step(t);
      engine.begin_micro_batch(true);
      engine.acquire(0, zt::UnitUse::Forward);
      engine.release(0);
      engine.acquire(0, zt::UnitUse::Backward);
      for (size_t k = 0; k < kTensors.size(); ++k) {
        const std::vector<float> p = store.read_param(kTensors[k].name);
        std::vector<float> g(p.size());
        for (int64_t i = 0; i < static_cast<int64_t>(p.size()); ++i) {
          const int tensor = static_cast<int>(k);
          const float local = (p[static_cast<size_t>(i)] - target(tensor, rank, i)) * curvature(tensor, i) +
                              noise(tensor, rank, t, i);
          g[static_cast<size_t>(i)] = local / static_cast<float>(world);
        }
        const int64_t numel = static_cast<int64_t>(g.size());
        backend->copy(store.grad(kTensors[k].name).reshaped({numel}), zt::Tensor(g.data(), zt::DType::F32, {numel}));
      }
      engine.gradients_ready(0);
      engine.release(0);
      engine.end_micro_batch();
      engine.reduce_gradients();
      (void)engine.gradient_norm();
      engine.apply_update(zt::OptimizerStep{config.lr, 1.0f, t, 1.0f});
      nlohmann::json params;
      for (const Tensor1& tensor : kTensors) params[tensor.name] = store.read_param(tensor.name);
      record["updates"].push_back(params);
    }
    std::ofstream(out + "/rank" + std::to_string(rank) + ".json") << record.dump();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zt_zero_one_adam_ranks: %s\n", error.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
