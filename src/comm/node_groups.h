// The two-level groups of a job on several nodes (ZeRO++'s hierarchical partitions and reductions,
// issue 36; a pipeline's cross-node boundaries): the ranks of one node, and the ranks with the same
// place on every node. With ranks numbered node by node (mpirun's by-slot mapping, srun's block
// distribution), node n holds ranks [n R, (n + 1) R) for R ranks per node:
//   intra: this rank's node, ranked by local index  (R ranks)
//   inter: the ranks of every node with this rank's local index, ranked by node  (N ranks)
// so that an all-reduce over intra then over inter is the all-reduce over the world.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace zt {

struct NodeGroups {
  int nodes = 1;           // N
  int ranks_per_node = 1;  // R
  std::unique_ptr<Communicator> intra;
  std::unique_ptr<Communicator> inter;
};

// Collective over `world`. `ranks_per_node` > 0 sets R (a test's or a user's layout: two "nodes"
// of 2 ranks on one machine); 0 takes the machines' own (the host names the ranks run on). Every
// node must hold R consecutive ranks: another layout is an error naming the ranks and hosts.
NodeGroups split_by_node(Communicator& world, int ranks_per_node);

}  // namespace zt
