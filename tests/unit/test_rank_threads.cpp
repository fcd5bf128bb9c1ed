// Unit tests of the threads-per-rank arithmetic (core/rank_threads.h): a rank's share of the
// CPUs its mask allows among the ranks of its node, the count chosen when OMP_NUM_THREADS is
// unset, and the oversubscription a set count is warned about.
#include <boost/test/unit_test.hpp>

#include <optional>
#include <vector>

#include "core/error.h"
#include "core/rank_threads.h"

namespace {

// A mask of `total` CPUs allowing [first, first + count).
zt::CpuMask cpus(size_t first, size_t count, size_t total = 64) {
  zt::CpuMask mask(total, 0);
  for (size_t cpu = first; cpu < first + count; ++cpu) mask[cpu] = 1;
  return mask;
}

// `ranks` unbound ranks, each allowed all `count` CPUs.
std::vector<zt::CpuMask> unbound(size_t ranks, size_t count) { return std::vector<zt::CpuMask>(ranks, cpus(0, count)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(rank_threads)

BOOST_AUTO_TEST_CASE(unbound_ranks_divide_the_cores) {
  // The case: 2 ranks without binding on 16 cores each started 16 threads.
  BOOST_TEST(zt::choose_rank_threads(unbound(2, 16), 0, std::nullopt, std::nullopt).threads == 8);
  BOOST_TEST(zt::choose_rank_threads(unbound(1, 16), 0, std::nullopt, std::nullopt).threads == 16);
  BOOST_TEST(zt::choose_rank_threads(unbound(3, 8), 2, std::nullopt, std::nullopt).threads == 2);  // 8/3 rounds down
  BOOST_TEST(zt::choose_rank_threads(unbound(3, 3), 1, std::nullopt, std::nullopt).threads == 1);  // 3 x 1/3 is 1
  const zt::RankThreads chosen = zt::choose_rank_threads(unbound(4, 16), 3, std::nullopt, std::nullopt);
  BOOST_TEST(chosen.threads == 4);
  BOOST_TEST(chosen.blas_threads == 4);
  BOOST_TEST(chosen.cpus == 16);
  BOOST_TEST(chosen.sharing == 4);
  BOOST_TEST(chosen.local_ranks == 4);
  BOOST_TEST(chosen.set_by.empty());
  BOOST_TEST(!chosen.oversubscribed);
}

BOOST_AUTO_TEST_CASE(at_least_one_thread) {
  // More ranks than cores (mpirun --oversubscribe): one thread each, no warning (nothing less to set).
  const zt::RankThreads chosen = zt::choose_rank_threads(unbound(4, 2), 0, std::nullopt, std::nullopt);
  BOOST_TEST(chosen.threads == 1);
  BOOST_TEST(chosen.share == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!zt::choose_rank_threads(unbound(4, 2), 0, 1, std::nullopt).oversubscribed);
}

BOOST_AUTO_TEST_CASE(bound_ranks_keep_their_own_cores) {
  // mpirun --map-by slot:PE=4 --bind-to core: disjoint masks, each rank its 4 cores.
  const std::vector<zt::CpuMask> masks = {cpus(0, 4), cpus(4, 4), cpus(8, 4)};
  for (size_t rank = 0; rank < masks.size(); ++rank) {
    const zt::RankThreads chosen = zt::choose_rank_threads(masks, rank, std::nullopt, std::nullopt);
    BOOST_TEST(chosen.threads == 4);
    BOOST_TEST(chosen.sharing == 1);
  }
  BOOST_TEST(!zt::choose_rank_threads(masks, 1, 4, std::nullopt).oversubscribed);
}

BOOST_AUTO_TEST_CASE(overlapping_masks_share_the_common_cores) {
  // Rank 0 on CPUs 0-3, rank 1 on CPUs 2-5: CPUs 2 and 3 count half to each.
  const std::vector<zt::CpuMask> masks = {cpus(0, 4), cpus(2, 4)};
  BOOST_TEST(zt::rank_core_share(masks, 0) == 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(zt::rank_core_share(masks, 1) == 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(zt::ranks_sharing_cpus(masks, 0) == 2);
  // A third rank elsewhere does not share them.
  const std::vector<zt::CpuMask> three = {cpus(0, 4), cpus(2, 4), cpus(8, 2)};
  BOOST_TEST(zt::ranks_sharing_cpus(three, 0) == 2);
  BOOST_TEST(zt::ranks_sharing_cpus(three, 2) == 1);
  BOOST_TEST(zt::choose_rank_threads(three, 2, std::nullopt, std::nullopt).threads == 2);
}

BOOST_AUTO_TEST_CASE(a_set_count_is_kept_and_oversubscription_warned) {
  // OMP_NUM_THREADS=8 with 2 unbound ranks on 8 cores: 16 threads on 8 cores.
  const zt::RankThreads over = zt::choose_rank_threads(unbound(2, 8), 0, 8, 8);
  BOOST_TEST(over.threads == 8);
  BOOST_TEST(over.set_by == "OMP_NUM_THREADS=8");
  BOOST_TEST(over.oversubscribed);
  BOOST_TEST(over.warning().find("OMP_NUM_THREADS=8 with 2 ranks on the same 8 CPUs") != std::string::npos);
  BOOST_TEST(over.warning().find("to let zerotune choose 4") != std::string::npos);
  // OMP_NUM_THREADS=4 fits: 2 x 4 = 8.
  BOOST_TEST(!zt::choose_rank_threads(unbound(2, 8), 1, 4, 4).oversubscribed);
  // OPENBLAS_NUM_THREADS alone oversubscribes too; OpenMP's count is still chosen.
  const zt::RankThreads blas = zt::choose_rank_threads(unbound(2, 8), 0, std::nullopt, 8);
  BOOST_TEST(blas.threads == 4);
  BOOST_TEST(blas.blas_threads == 8);
  BOOST_TEST(blas.set_by == "OPENBLAS_NUM_THREADS=8");
  BOOST_TEST(blas.oversubscribed);
  BOOST_TEST(blas.describe().find("4 OpenMP and 8 OpenBLAS threads per rank") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_banner_says_why) {
  const zt::RankThreads chosen = zt::choose_rank_threads(unbound(2, 8), 0, std::nullopt, std::nullopt);
  BOOST_TEST(chosen.describe() ==
             "threads: 4 OpenMP/OpenBLAS threads per rank (8 CPUs in rank 0's affinity, shared by 2 of the 2 ranks on "
             "its node; OMP_NUM_THREADS unset)");
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_named) {
  BOOST_CHECK_THROW(zt::choose_rank_threads(unbound(2, 8), 2, std::nullopt, std::nullopt), zt::Error);
  BOOST_CHECK_THROW(zt::choose_rank_threads(unbound(2, 8), 0, 0, std::nullopt), zt::Error);
}

BOOST_AUTO_TEST_SUITE_END()
