// The Boost.Test entry point of zt_emu_tests (label gpu-emu): the emulated device's own tests
// (runtime, kernel execution and its checks, cuBLASLt, NCCL); the suites live in test_*.cpp.
#define BOOST_TEST_MODULE zerotune_emu_tests
#include <boost/test/unit_test.hpp>  // the framework: Boost.Test's static library
