// The node-local and cross-node groups of node_groups.h.
#include "comm/node_groups.h"

#include <cstdio>
#include <string>
#include <vector>

#include "comm/device_communicator.h"
#include "core/error.h"

namespace zt {

namespace {

// "host|local_rank|local_size" (what all_gather_strings carries) and back; host names hold no '|'.
std::string place_text(const Communicator& world) {
  return cat(this_host(), "|", world.local_rank(), "|", world.local_size());
}

RankPlace parse_place(const std::string& text) {
  const size_t second = text.rfind('|'), first = text.rfind('|', second - 1);
  return {text.substr(0, first), std::stoi(text.substr(first + 1, second - first - 1)), std::stoi(text.substr(second + 1))};
}

// Where the host names group the ranks otherwise than the shared-memory nodes of R ranks: two
// ranks of one node on different hosts, or of different nodes on one host. Empty when they agree.
std::string host_disagreement(const std::vector<RankPlace>& places, int per_node) {
  const size_t R = static_cast<size_t>(per_node);
  for (size_t rank = 0; rank < places.size(); ++rank) {
    const RankPlace &mine = places[rank], &first = places[rank / R * R];
    if (mine.host != first.host)
      return cat("ranks ", rank / R * R, " and ", rank, " share memory but run on hosts ", first.host, " and ", mine.host);
  }
  for (size_t a = 0; a < places.size(); a += R)  // the nodes' first ranks
    for (size_t b = a + R; b < places.size(); b += R)
      if (places[a].host == places[b].host)
        return cat("ranks ", a, " and ", b, " run on host ", places[a].host, " but do not share memory");
  return "";
}

}  // namespace

NodeLayout node_layout(const std::vector<RankPlace>& places) {
  ZT_CHECK(!places.empty(), "node groups: no ranks");
  const int world = static_cast<int>(places.size()), per_node = places[0].local_size;
  for (int rank = 0; rank < world; ++rank) {
    const RankPlace& place = places[static_cast<size_t>(rank)];
    ZT_CHECK(world % per_node == 0 && place.local_size == per_node && place.local_rank == rank % per_node,
             "node groups: rank ", rank, " on ", place.host, " is rank ", place.local_rank, " of the ", place.local_size,
             " that share its memory, but the ranks of a node must be consecutive and as many on every node (",
             per_node, " on ", places[0].host, "): start the ranks node by node (mpirun --map-by slot, srun "
             "--distribution=block) with the same count on each, or set --ranks-per-node");
  }
  return {per_node, host_disagreement(places, per_node)};
}

NodeGroups split_by_node(Communicator& world, int ranks_per_node) {
  NodeGroups groups;
  if (ranks_per_node > 0) {
    ZT_CHECK(world.size() % ranks_per_node == 0, "node groups: ", ranks_per_node, " ranks per node do not divide the ",
             world.size(), " ranks");
    groups.ranks_per_node = ranks_per_node;
  } else {
    std::vector<RankPlace> places;
    for (const std::string& text : world.all_gather_strings(place_text(world))) places.push_back(parse_place(text));
    const NodeLayout layout = node_layout(places);
    if (!layout.disagreement.empty() && world.rank() == 0)
      std::fprintf(stderr, "zerotune: warning: node groups: %s; the ranks that share memory make a node (%d per node)\n",
                   layout.disagreement.c_str(), layout.ranks_per_node);
    groups.ranks_per_node = layout.ranks_per_node;
  }
  groups.nodes = world.size() / groups.ranks_per_node;
  const int node = world.rank() / groups.ranks_per_node, local = world.rank() % groups.ranks_per_node;
  groups.intra = world.split_uniform(node, local, groups.ranks_per_node);
  groups.inter = world.split_uniform(local, node, groups.nodes);
  return groups;
}

}  // namespace zt
