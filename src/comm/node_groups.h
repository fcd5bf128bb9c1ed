// The two-level groups of a job on several nodes (ZeRO++'s hierarchical partitions and reductions,
// issue 36; a pipeline's cross-node boundaries): the ranks of one node, and the ranks with the same
// place on every node. With ranks numbered node by node (mpirun's by-slot mapping, srun's block
// distribution), node n holds ranks [n R, (n + 1) R) for R ranks per node:
//   intra: this rank's node, ranked by local index  (R ranks)
//   inter: the ranks of every node with this rank's local index, ranked by node  (N ranks)
// so that an all-reduce over intra then over inter is the all-reduce over the world.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt {

struct NodeGroups {
  int nodes = 1;           // N
  int ranks_per_node = 1;  // R
  std::unique_ptr<Communicator> intra;
  std::unique_ptr<Communicator> inter;
};

// What a rank knows of its place: the host it runs on, and its rank among the ranks that share its
// memory and how many they are (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): Communicator::local_rank,
// local_size).
struct RankPlace {
  std::string host;
  int local_rank = 0;
  int local_size = 1;
};

struct NodeLayout {
  int ranks_per_node = 1;    // R: from the shared-memory groups
  std::string disagreement;  // non-empty when the host names group the ranks otherwise (a warning)
};

// The machines' own layout from every rank's place (`places[r]` of rank r). The shared-memory
// groups decide: each must hold R consecutive ranks (an error names the first rank out of place).
// Where the host names disagree, the shared-memory groups still win: they are what MPI knows of
// which processes share a machine and so its fast links (shared memory, NVLink), which ZeRO++'s
// node-local hops are for, while a host name is a label that containers may give every node alike
// ("localhost") or one machine several of. `disagreement` then names the ranks that differ.
NodeLayout node_layout(const std::vector<RankPlace>& places);

// Collective over `world`. `ranks_per_node` > 0 sets R (a test's or a user's layout: two "nodes"
// of 2 ranks on one machine; it overrides the machines'); 0 takes the machines' own (node_layout,
// its disagreement printed on rank 0 as a warning). The groups are world.split_uniform()s, so
// over NCCL they are NCCL communicators over the split MPI ones.
NodeGroups split_by_node(Communicator& world, int ranks_per_node);

}  // namespace zt
