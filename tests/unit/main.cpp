// The Boost.Test entry point of zt_unit_tests; the suites live in test_*.cpp.
#define BOOST_TEST_MODULE zerotune_unit_tests
#include <boost/test/unit_test.hpp>  // the framework: Boost.Test's static library
