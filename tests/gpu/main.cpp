// The Boost.Test entry point of zt_gpu_tests (label gpu): the CUDA backend against the CPU
// backend; the suites live in test_*.cpp. Needs an NVIDIA GPU: without one every test fails
// with a message saying so (CI excludes the label with ctest -LE gpu). The same sources make
// zt_gpu_tests_emu (label gpu-emu), which runs them on the emulated device (src/emu).
#define BOOST_TEST_MODULE zerotune_gpu_tests
#include <boost/test/unit_test.hpp>  // the framework: Boost.Test's static library
#include <mpi.h>

// MPI is up for the whole run, as in zerotune: the emulated NCCL runs over it (a real NCCL
// does not need it; a singleton MPI_Init costs nothing there).
struct MpiForTheTests {
  MpiForTheTests() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
  }
  ~MpiForTheTests() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
};
BOOST_TEST_GLOBAL_FIXTURE(MpiForTheTests);
