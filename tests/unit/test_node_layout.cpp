// The machines' node layout for ZeRO++'s node groups (comm/node_groups.h node_layout): the
// shared-memory groups (MPI_Comm_split_type) decide, must hold consecutive ranks, and win over
// host names that group the ranks otherwise (with a warning naming the ranks).
#include <boost/test/unit_test.hpp>

#include "comm/node_groups.h"
#include "core/error.h"

namespace zt {
namespace {

// Ranks numbered node by node: `hosts[r]` for rank r, R ranks per shared-memory node.
std::vector<RankPlace> block_places(const std::vector<std::string>& hosts, int per_node) {
  std::vector<RankPlace> places;
  for (size_t rank = 0; rank < hosts.size(); ++rank)
    places.push_back({hosts[rank], static_cast<int>(rank) % per_node, per_node});
  return places;
}

BOOST_AUTO_TEST_SUITE(node_layout)

BOOST_AUTO_TEST_CASE(two_nodes_of_two_agree_with_their_hosts) {
  const NodeLayout layout = ::zt::node_layout(block_places({"n1", "n1", "n2", "n2"}, 2));
  BOOST_TEST(layout.ranks_per_node == 2);
  BOOST_TEST(layout.disagreement.empty());
}

BOOST_AUTO_TEST_CASE(shared_memory_wins_over_one_host_name_on_every_node) {
  // Containers that call every node "localhost": two nodes by shared memory all the same.
  const NodeLayout layout = ::zt::node_layout(block_places({"localhost", "localhost", "localhost", "localhost"}, 2));
  BOOST_TEST(layout.ranks_per_node == 2);
  BOOST_TEST(layout.disagreement == "ranks 0 and 2 run on host localhost but do not share memory");
}

BOOST_AUTO_TEST_CASE(shared_memory_wins_over_two_host_names_on_one_machine) {
  const NodeLayout layout = ::zt::node_layout(block_places({"a", "b", "a", "b"}, 4));
  BOOST_TEST(layout.ranks_per_node == 4);
  BOOST_TEST(layout.disagreement == "ranks 0 and 1 share memory but run on hosts a and b");
}

BOOST_AUTO_TEST_CASE(round_robin_ranks_are_refused) {
  // mpirun --map-by node: ranks 0 and 2 on n1, 1 and 3 on n2 (rank 1 is the first of its node).
  const std::vector<RankPlace> places = {{"n1", 0, 2}, {"n2", 0, 2}, {"n1", 1, 2}, {"n2", 1, 2}};
  BOOST_CHECK_EXCEPTION(::zt::node_layout(places), Error, [](const Error& error) {
    return std::string(error.what()).find("rank 1 on n2 is rank 0 of the 2 that share its memory") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(uneven_nodes_are_refused) {
  const std::vector<RankPlace> places = {{"n1", 0, 2}, {"n1", 1, 2}, {"n2", 0, 1}};
  BOOST_CHECK_EXCEPTION(::zt::node_layout(places), Error, [](const Error& error) {
    return std::string(error.what()).find("as many on every node") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace zt
