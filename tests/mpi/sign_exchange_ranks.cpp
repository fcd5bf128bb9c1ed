// An MPI program around SignExchange (zero/sign_exchange.h) on the CPU backend over MPI, for
// tests/mpi/sign_exchange_oracle.py: every rank averages a vector of its own, `rounds` times
// (the error feedback carrying over), and writes what it got to OUT/rank<r>.json: the average
// (add_average), its own chunk (add_own_chunk) and both error buffers after each round. The
// Python side computes DeepSpeed's compressed_allreduce from the same inputs and compares.
//   mpiexec -np W zt_sign_exchange_ranks OUT CHUNK ROUNDS
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
#include "zero/sign_exchange.h"

namespace {

// Rank r's vector in round k, element i: varied signs and magnitudes, a few exact zeros.
float input(int rank, int round, int64_t i) {
  if ((i + round) % 11 == 0) return 0.0f;
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 2.1 * round) * (1.0 + 0.5 * rank));
}

std::vector<float> host(zt::Backend& backend, zt::Tensor tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.numel()));
  backend.copy(zt::Tensor(values.data(), zt::DType::F32, {tensor.numel()}), tensor);
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    ZT_CHECK(argc == 4, "usage: zt_sign_exchange_ranks OUT CHUNK ROUNDS");
    const std::string out = argv[1];
    const int64_t chunk = std::stoll(argv[2]);
    const int rounds = std::stoi(argv[3]);
    std::unique_ptr<zt::Communicator> comm = zt::make_mpi_communicator(MPI_COMM_WORLD);
    std::unique_ptr<zt::Backend> backend = zt::make_cpu_backend();
    zt::SignExchange exchange(*backend, *comm, chunk);
    const int64_t total = comm->size() * chunk;
    nlohmann::json record = {{"rank", comm->rank()}, {"world", comm->size()}, {"chunk", chunk}, {"rounds", nlohmann::json::array()}};
    std::vector<float> x(static_cast<size_t>(total)), average(static_cast<size_t>(total)), own(static_cast<size_t>(chunk));
    for (int round = 0; round < rounds; ++round) {
      for (int64_t i = 0; i < total; ++i) x[static_cast<size_t>(i)] = input(comm->rank(), round, i);
      backend->copy(exchange.vector(), zt::Tensor(x.data(), zt::DType::F32, {total}));
      exchange.exchange();
      std::fill(average.begin(), average.end(), 0.0f);
      std::fill(own.begin(), own.end(), 0.0f);
      exchange.add_average(zt::Tensor(average.data(), zt::DType::F32, {total}), 1.0f);
      exchange.add_own_chunk(zt::Tensor(own.data(), zt::DType::F32, {chunk}), 1.0f);
      record["rounds"].push_back({{"input", x},
                                  {"average", average},
                                  {"own_chunk", own},
                                  {"worker_error", host(*backend, exchange.worker_error())},
                                  {"server_error", host(*backend, exchange.server_error())}});
    }
    std::ofstream(out + "/rank" + std::to_string(comm->rank()) + ".json") << record.dump();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zt_sign_exchange_ranks: %s\n", error.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
