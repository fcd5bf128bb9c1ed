// Which rank runs which pipeline stage for which data-parallel replica (issue 32).
// P stages x D replicas = the world. Rank r runs stage r / D of replica r % D (DeepSpeed's
// PipeDataParallelTopology: the data-parallel axis innermost). With ranks numbered in the
// hostfile's order (mpirun's by-slot mapping, srun's block distribution), a stage's D ranks are
// consecutive, so its data-parallel group - the gradient reduction, whose bytes grow with the
// model - stays inside a node where it fits, and consecutive stages of a replica, which exchange
// only activations, are D ranks apart: a stage boundary crosses nodes where a stage ends at a
// node's end. cross_node_boundaries lists those, and the run prints them at start.
#pragma once
#include <string>
#include <vector>

namespace zt {

class PipelineTopology {
 public:
  // `stages` must divide `world_size`; anything else is an error naming both.
  PipelineTopology(int world_size, int stages);

  int world_size() const { return world_size_; }
  int stages() const { return stages_; }      // P
  int replicas() const { return replicas_; }  // D

  int stage_of(int rank) const { return rank / replicas_; }
  int replica_of(int rank) const { return rank % replicas_; }
  int rank_of(int stage, int replica) const { return stage * replicas_ + replica; }
  // The ranks of `stage` (its data-parallel group), replica order.
  std::vector<int> stage_ranks(int stage) const;
  // The ranks of `replica`'s pipeline, stage order.
  std::vector<int> replica_ranks(int replica) const;
  // The rank that runs the next (previous) stage of `rank`'s replica, -1 at the last (first).
  int next_rank(int rank) const;
  int previous_rank(int rank) const;

 private:
  int world_size_;
  int stages_;
  int replicas_;
};

// A boundary between stage `stage` and `stage + 1` of `replica` whose two ranks are on
// different nodes.
struct CrossNodeBoundary {
  int replica;
  int stage;
  int from_rank;
  int to_rank;
};

// `node_of_rank[r]`: rank r's node (host name). Every crossing boundary, by stage then replica.
std::vector<CrossNodeBoundary> cross_node_boundaries(const PipelineTopology& topology,
                                                     const std::vector<std::string>& node_of_rank);

// The lines a run prints at start: each stage's ranks and nodes, and which boundaries cross nodes.
std::vector<std::string> describe_topology(const PipelineTopology& topology,
                                           const std::vector<std::string>& node_of_rank);

}  // namespace zt
