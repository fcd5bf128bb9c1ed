// The Boost.Test entry point of zt_gpu_tests (label gpu): the CUDA backend against the CPU
// backend; the suites live in test_*.cpp. Needs an NVIDIA GPU: without one every test fails
// with a message saying so (CI excludes the label with ctest -LE gpu).
#define BOOST_TEST_MODULE zerotune_gpu_tests
#include <boost/test/included/unit_test.hpp>
