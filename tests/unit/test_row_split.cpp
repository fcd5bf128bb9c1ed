// Tests of DeepSpeed-Chat's row splits (data/row_split.h): permutations and boundaries recorded
// from numpy 1.x / Python (numpy.random.RandomState(seed).shuffle(numpy.arange(n, dtype=uint32)),
// data_utils.get_raw_dataset_split_index's rounding), and the roles of rows under a hold-out and
// --data-split. tests/cli/test_deepspeed_chat.sh checks whole prep runs against numpy.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "data/row_split.h"
#include "test_util.h"

BOOST_AUTO_TEST_SUITE(row_split)

using Rows = std::vector<int64_t>;

BOOST_AUTO_TEST_CASE(numpy_permutations) {
  BOOST_TEST(zt::numpy_shuffled_rows(10, 1234) == (Rows{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}), boost::test_tools::per_element());
  BOOST_TEST(zt::numpy_shuffled_rows(7, 42) == (Rows{0, 1, 5, 2, 4, 3, 6}), boost::test_tools::per_element());
  const Rows first = {164, 200, 73, 163, 115, 275, 262, 165, 222, 77, 276, 112, 67, 106, 224, 7, 288, 146, 127, 80};
  const Rows order = zt::numpy_shuffled_rows(300, 1234);
  BOOST_TEST(Rows(order.begin(), order.begin() + 20) == first, boost::test_tools::per_element());
  BOOST_TEST(zt::numpy_shuffled_rows(1, 5) == Rows{0}, boost::test_tools::per_element());
  BOOST_TEST(zt::numpy_shuffled_rows(0, 5).empty());
}

BOOST_AUTO_TEST_CASE(boundaries_round_half_to_even_and_shift) {
  // round(2.5) = 2 in Python: [0, 2, 4], then every boundary moved by one so the last is 5.
  BOOST_TEST(zt::split_boundaries(5, {1, 1}) == (Rows{0, 3, 5}), boost::test_tools::per_element());
  BOOST_TEST(zt::split_boundaries(11, {2, 4, 4}) == (Rows{0, 3, 7, 11}), boost::test_tools::per_element());
  BOOST_TEST(zt::split_boundaries(300, {0.9, 0.1}) == (Rows{0, 270, 300}), boost::test_tools::per_element());
  BOOST_TEST(zt::split_boundaries(7, {9, 1}) == (Rows{0, 6, 7}), boost::test_tools::per_element());
  zt::test::check_error([] { zt::split_boundaries(5, {0, 0}); }, "at least one must be above 0");
}

BOOST_AUTO_TEST_CASE(held_out_portion_is_the_permutations_tail) {
  const Rows held = zt::deepspeed_chat_portion(300, {0.9, 0.1}, 1, 1234);
  const Rows expected = {14, 107, 258, 3, 291, 128, 139, 231, 195, 76, 251, 240, 50, 246, 120,
                         282, 236, 158, 171, 30, 154, 233, 279, 177, 143, 152, 204, 53, 294, 211};
  BOOST_TEST(held == expected, boost::test_tools::per_element());
  zt::test::check_error([] { zt::deepspeed_chat_portion(10, {1, 1}, 2, 1); }, "no such portion");
}

BOOST_AUTO_TEST_CASE(roles_under_hold_out_and_data_split) {
  const std::vector<zt::RowRole> roles = zt::deepspeed_chat_row_roles(300, 0.1, {2, 4, 4}, 0, 1234);
  int64_t kept = 0, held = 0;
  for (zt::RowRole role : roles) {
    kept += role == zt::RowRole::Kept;
    held += role == zt::RowRole::HeldOut;
  }
  BOOST_TEST(kept == 54);  // 20% of the 270 kept rows
  BOOST_TEST(held == 6);   // 20% of the 30 held out
  // Phase 1's held-out rows are the first 6 of a permutation (seed 1234) of the 30 held-out positions.
  const Rows positions = zt::deepspeed_chat_portion(30, {2, 4, 4}, 0, 1234);
  const Rows held_rows = zt::deepspeed_chat_portion(300, {0.9, 0.1}, 1, 1234);
  for (int64_t position : positions) BOOST_TEST((roles[static_cast<size_t>(held_rows[static_cast<size_t>(position)])] == zt::RowRole::HeldOut));
  const std::vector<zt::RowRole> all = zt::deepspeed_chat_row_roles(4, 0.0, {}, 0, 1);
  BOOST_TEST((all == std::vector<zt::RowRole>(4, zt::RowRole::Kept)));
}

BOOST_AUTO_TEST_SUITE_END()
