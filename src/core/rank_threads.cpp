// Threads per rank (rank_threads.h): the share arithmetic, and the start-up that applies it.
#include "core/rank_threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace zt {

namespace {

RankThreads& chosen() {
  static RankThreads threads;
  return threads;
}

bool allows(const CpuMask& mask, size_t cpu) { return cpu < mask.size() && mask[cpu] != 0; }

int count_cpus(const CpuMask& mask) { return static_cast<int>(std::count(mask.begin(), mask.end(), uint8_t{1})); }

// A variable that is set to something (OpenMP and OpenBLAS treat an empty one as unset).
bool variable_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0';
}

// This process's affinity mask (the cpuset or binding it runs under). Where the kernel does not
// say (more CPUs than a cpu_set_t holds), every CPU the C++ runtime counts.
CpuMask own_cpu_mask() {
  CpuMask mask(CPU_SETSIZE, 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (size_t cpu = 0; cpu < static_cast<size_t>(CPU_SETSIZE); ++cpu) mask[cpu] = CPU_ISSET(cpu, &set) ? 1 : 0;
  } else {
    const size_t cpus = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, CPU_SETSIZE);
    std::fill(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(cpus), uint8_t{1});
  }
  return mask;
}

void check_mpi(int status, const char* call) {
  ZT_CHECK(status == MPI_SUCCESS, "threads per rank: ", call, " failed (MPI error ", status, ")");
}

// The masks of the ranks on this node (the processes that share its memory: what
// OMPI_COMM_WORLD_LOCAL_SIZE or SLURM_NTASKS_PER_NODE count, whatever the launcher), and this
// rank's place among them.
std::vector<CpuMask> node_cpu_masks(MPI_Comm world, int& local_rank) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(world, &rank), "MPI_Comm_rank");
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int local_size = 1;
  check_mpi(MPI_Comm_rank(node, &local_rank), "MPI_Comm_rank(node)");
  check_mpi(MPI_Comm_size(node, &local_size), "MPI_Comm_size(node)");
  const CpuMask mine = own_cpu_mask();
  std::vector<uint8_t> all(mine.size() * static_cast<size_t>(local_size));
  check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT8_T, all.data(),
                          static_cast<int>(mine.size()), MPI_UINT8_T, node),
            "MPI_Allgather(CPU masks)");
  check_mpi(MPI_Comm_free(&node), "MPI_Comm_free");
  std::vector<CpuMask> masks;
  for (int r = 0; r < local_size; ++r) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(mine.size() * static_cast<size_t>(r));
    masks.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(mine.size()));
  }
  return masks;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "this node";
  return name;
}

}  // namespace

double rank_core_share(const std::vector<CpuMask>& masks, size_t me) {
  ZT_CHECK(me < masks.size(), "rank_core_share: rank ", me, " of ", masks.size(), " masks");
  double share = 0.0;
  for (size_t cpu = 0; cpu < masks[me].size(); ++cpu) {
    if (!allows(masks[me], cpu)) continue;
    int holders = 0;
    for (const CpuMask& mask : masks) holders += allows(mask, cpu) ? 1 : 0;
    share += 1.0 / holders;
  }
  return share;
}

int ranks_sharing_cpus(const std::vector<CpuMask>& masks, size_t me) {
  ZT_CHECK(me < masks.size(), "ranks_sharing_cpus: rank ", me, " of ", masks.size(), " masks");
  int sharing = 0;
  for (const CpuMask& mask : masks) {
    bool overlaps = false;
    for (size_t cpu = 0; cpu < masks[me].size() && !overlaps; ++cpu) overlaps = allows(masks[me], cpu) && allows(mask, cpu);
    sharing += overlaps ? 1 : 0;
  }
  return sharing;
}

RankThreads choose_rank_threads(const std::vector<CpuMask>& masks, size_t me, std::optional<int> omp_requested,
                                std::optional<int> blas_requested) {
  ZT_CHECK(me < masks.size(), "choose_rank_threads: rank ", me, " of ", masks.size(), " masks");
  ZT_CHECK(!omp_requested || *omp_requested >= 1, "threads per rank: OpenMP asks for ", *omp_requested, " threads");
  ZT_CHECK(!blas_requested || *blas_requested >= 1, "threads per rank: OpenBLAS asks for ", *blas_requested, " threads");
  RankThreads result;
  result.local_ranks = static_cast<int>(masks.size());
  result.cpus = std::max(1, count_cpus(masks[me]));
  result.sharing = std::max(1, ranks_sharing_cpus(masks, me));
  result.share = rank_core_share(masks, me);
  // A small epsilon: 3 x 1/3 sums to 0.999... in floating point, and that is 1 core.
  const int fair = std::max(1, static_cast<int>(std::floor(result.share + 1e-9)));
  result.threads = omp_requested.value_or(fair);
  result.blas_threads = blas_requested.value_or(result.threads);
  if (omp_requested) result.set_by = cat("OMP_NUM_THREADS=", *omp_requested);
  if (blas_requested && (!omp_requested || *blas_requested != *omp_requested))
    result.set_by += cat(result.set_by.empty() ? "" : ", ", "OPENBLAS_NUM_THREADS=", *blas_requested);
  // One thread per rank is the least there is: more ranks than cores is the launcher's choice.
  const int most = std::max(result.threads, result.blas_threads);
  result.oversubscribed = !result.set_by.empty() && most > 1 && most > fair;
  return result;
}

std::string RankThreads::describe() const {
  const std::string counts =
      blas_threads == threads ? cat(threads, " OpenMP/OpenBLAS threads per rank")
                              : cat(threads, " OpenMP and ", blas_threads, " OpenBLAS threads per rank");
  const std::string cores = cat(cpus, " CPUs in rank 0's affinity, shared by ", sharing, " of the ", local_ranks,
                                " ranks on its node");
  if (set_by.empty()) return cat("threads: ", counts, " (", cores, "; OMP_NUM_THREADS unset)");
  return cat("threads: ", counts, " (", set_by, "; ", cores, oversubscribed ? ": oversubscribed" : "", ")");
}

std::string RankThreads::warning() const {
  const int most = std::max(threads, blas_threads);
  const int fair = std::max(1, static_cast<int>(std::floor(share + 1e-9)));
  return cat("warning: ", set_by, " with ", sharing, " ranks on the same ", cpus, " CPUs of ", host_name(), " runs ",
             sharing * most, " threads on them (", fair, " per rank fit): oversubscribed cores make training several "
             "times slower. Unset OMP_NUM_THREADS (and OPENBLAS_NUM_THREADS) to let zerotune choose ", fair,
             ", or give each rank its own cores (mpirun --map-by slot:PE=N --bind-to core; srun --cpus-per-task=N)");
}

const RankThreads& set_rank_threads(MPI_Comm world) {
  int local_rank = 0;
  const std::vector<CpuMask> masks = node_cpu_masks(world, local_rank);
  const bool omp_set = variable_set("OMP_NUM_THREADS"), blas_set = variable_set("OPENBLAS_NUM_THREADS");
  // What the libraries made of the variables (OpenMP's lists such as "8,2" included); OpenBLAS
  // reads OMP_NUM_THREADS too when OPENBLAS_NUM_THREADS is unset.
  const std::optional<int> omp = omp_set ? std::optional<int>(omp_get_max_threads()) : std::nullopt;
  const std::optional<int> blas =
      blas_set || omp_set ? std::optional<int>(openblas_get_num_threads()) : std::nullopt;
  RankThreads& result = chosen();
  result = choose_rank_threads(masks, static_cast<size_t>(local_rank), omp, blas);
  if (!omp_set) omp_set_num_threads(result.threads);  // before the first parallel region starts the pool
  if (!blas) openblas_set_num_threads(result.blas_threads);
  if (result.oversubscribed && local_rank == 0) {
    std::fprintf(stderr, "zerotune: %s\n", result.warning().c_str());
    std::fflush(stderr);
  }
  return result;
}

const RankThreads& rank_threads() { return chosen(); }

}  // namespace zt
