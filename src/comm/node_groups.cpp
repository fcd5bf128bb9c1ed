// The node-local and cross-node groups of node_groups.h.
#include "comm/node_groups.h"

#include <string>
#include <vector>

#include "comm/device_communicator.h"
#include "core/error.h"

namespace zt {

namespace {

// R from the host each rank runs on: the ranks of a host must be consecutive and every host must
// have as many.
int ranks_per_host(Communicator& world) {
  const std::vector<std::string> hosts = world.all_gather_strings(this_host());
  int per_node = 1;
  while (per_node < world.size() && hosts[static_cast<size_t>(per_node)] == hosts[0]) ++per_node;
  for (int rank = 0; rank < world.size(); ++rank) {
    const std::string& first_of_node = hosts[static_cast<size_t>(rank / per_node * per_node)];
    ZT_CHECK(world.size() % per_node == 0 && hosts[static_cast<size_t>(rank)] == first_of_node,
             "node groups: rank ", rank, " runs on ", hosts[static_cast<size_t>(rank)], " but the ranks of a node must be "
             "consecutive and as many on every node (", per_node, " on ", hosts[0], "): start the ranks node by node "
             "(mpirun --map-by slot, srun --distribution=block) with the same count on each");
  }
  return per_node;
}

}  // namespace

NodeGroups split_by_node(Communicator& world, int ranks_per_node) {
  NodeGroups groups;
  if (ranks_per_node > 0) {
    ZT_CHECK(world.size() % ranks_per_node == 0, "node groups: ", ranks_per_node, " ranks per node do not divide the ",
             world.size(), " ranks");
    groups.ranks_per_node = ranks_per_node;
  } else {
    groups.ranks_per_node = ranks_per_host(world);
  }
  groups.nodes = world.size() / groups.ranks_per_node;
  const int node = world.rank() / groups.ranks_per_node, local = world.rank() % groups.ranks_per_node;
  groups.intra = world.split_uniform(node, local, groups.ranks_per_node);
  groups.inter = world.split_uniform(local, node, groups.nodes);
  return groups;
}

}  // namespace zt
