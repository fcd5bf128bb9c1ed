// OpenMP/OpenBLAS threads per MPI rank (issue 35 item 4). Each of N ranks on a node starting a
// thread per core runs N x cores threads on the cores: 8-15x slower than one thread per core.
// When OMP_NUM_THREADS is unset, zerotune gives each rank its share of the CPUs it may run on
// (its affinity mask: the cpuset, a binding) among the ranks of the job on its node that may run
// on the same CPUs; when OMP_NUM_THREADS (or OPENBLAS_NUM_THREADS) is set so that the ranks
// oversubscribe their cores, it warns. Set at start-up, before the first parallel region starts
// OpenMP's pool.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

namespace zt {

// The CPUs a process may run on: one byte per CPU, 1 where allowed.
using CpuMask = std::vector<uint8_t>;

// Rank `me`'s share of the cores its mask allows, among the ranks of one node whose masks are
// `masks`: each allowed CPU counts 1/k, k = the ranks whose masks hold it (8 CPUs shared by 2
// unbound ranks: 4 each; ranks bound to disjoint cores: their own cores).
double rank_core_share(const std::vector<CpuMask>& masks, size_t me);

// The ranks whose masks overlap `me`'s (itself included).
int ranks_sharing_cpus(const std::vector<CpuMask>& masks, size_t me);

// What a rank runs with, and why.
struct RankThreads {
  int threads = 1;           // OpenMP threads of this rank (OpenBLAS's: blas_threads)
  int blas_threads = 1;
  int cpus = 1;              // CPUs in this rank's mask
  int sharing = 1;           // local ranks that may run on them (this one included)
  int local_ranks = 1;       // ranks of the job on this node
  double share = 1.0;        // rank_core_share: the cores this rank has to itself
  std::string set_by;        // "" when zerotune chose, else "OMP_NUM_THREADS=8" (and/or OPENBLAS_...)
  bool oversubscribed = false;  // set_by's threads exceed the share (and more than 1)

  std::string describe() const;  // the start banner's line
  std::string warning() const;   // for oversubscribed: what happens and what to do
};

// The arithmetic of set_rank_threads: `omp_requested` / `blas_requested` are the counts the
// environment sets (nothing when the variable is unset). Unset: floor(share), at least 1; an
// unset OpenBLAS count follows OpenMP's (OpenBLAS itself reads OMP_NUM_THREADS).
RankThreads choose_rank_threads(const std::vector<CpuMask>& masks, size_t me, std::optional<int> omp_requested,
                                std::optional<int> blas_requested);

// Collective over `world` (every rank calls it once at start-up): gathers the masks of the ranks
// on this node, chooses, calls omp_set_num_threads / openblas_set_num_threads for what the
// environment leaves unset, and warns on stderr (the node's first rank) when oversubscribed.
const RankThreads& set_rank_threads(MPI_Comm world);

// What set_rank_threads chose (the defaults before it ran).
const RankThreads& rank_threads();

}  // namespace zt
