// Ranks -> stages x replicas (pipeline_topology.h).
#include "pipe/pipeline_topology.h"

#include <set>

#include "core/error.h"

namespace zt {

namespace {

// "0-3" or "0,2,5": the ranks of a list, runs of consecutive ranks shortened.
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t last = i;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    text += cat(text.empty() ? "" : ",", ranks[i], last > i ? cat("-", ranks[last]) : "");
    i = last + 1;
  }
  return text;
}

}  // namespace

PipelineTopology::PipelineTopology(int world_size, int stages) : world_size_(world_size), stages_(stages) {
  ZT_CHECK(stages >= 1, "pipeline: --pipeline-stages ", stages, " must be at least 1");
  ZT_CHECK(world_size >= 1 && world_size % stages == 0, "pipeline: ", stages, " stages do not divide the ",
           world_size, " ranks (each stage needs the same number of data-parallel replicas)");
  replicas_ = world_size / stages;
}

std::vector<int> PipelineTopology::stage_ranks(int stage) const {
  std::vector<int> ranks;
  for (int replica = 0; replica < replicas_; ++replica) ranks.push_back(rank_of(stage, replica));
  return ranks;
}

std::vector<int> PipelineTopology::replica_ranks(int replica) const {
  std::vector<int> ranks;
  for (int stage = 0; stage < stages_; ++stage) ranks.push_back(rank_of(stage, replica));
  return ranks;
}

int PipelineTopology::next_rank(int rank) const {
  return stage_of(rank) + 1 < stages_ ? rank_of(stage_of(rank) + 1, replica_of(rank)) : -1;
}

int PipelineTopology::previous_rank(int rank) const {
  return stage_of(rank) > 0 ? rank_of(stage_of(rank) - 1, replica_of(rank)) : -1;
}

std::vector<CrossNodeBoundary> cross_node_boundaries(const PipelineTopology& topology,
                                                     const std::vector<std::string>& node_of_rank) {
  ZT_CHECK(static_cast<int>(node_of_rank.size()) == topology.world_size(), "cross_node_boundaries: ",
           node_of_rank.size(), " node names for ", topology.world_size(), " ranks");
  std::vector<CrossNodeBoundary> crossings;
  for (int stage = 0; stage + 1 < topology.stages(); ++stage)
    for (int replica = 0; replica < topology.replicas(); ++replica) {
      const int from = topology.rank_of(stage, replica), to = topology.rank_of(stage + 1, replica);
      if (node_of_rank[static_cast<size_t>(from)] != node_of_rank[static_cast<size_t>(to)])
        crossings.push_back({replica, stage, from, to});
    }
  return crossings;
}

std::vector<std::string> describe_topology(const PipelineTopology& topology,
                                           const std::vector<std::string>& node_of_rank) {
  std::vector<std::string> lines{cat("pipeline: ", topology.stages(), " stages x ", topology.replicas(),
                                     " data-parallel replicas (rank r: stage r / ", topology.replicas(),
                                     ", replica r % ", topology.replicas(), ")")};
  for (int stage = 0; stage < topology.stages(); ++stage) {
    std::set<std::string> nodes;
    for (int rank : topology.stage_ranks(stage)) nodes.insert(node_of_rank.at(static_cast<size_t>(rank)));
    std::string names;
    for (const std::string& node : nodes) names += cat(names.empty() ? "" : ", ", node);
    lines.push_back(cat("pipeline: stage ", stage, ": ranks ", rank_list(topology.stage_ranks(stage)), " on ",
                        names));
  }
  const std::vector<CrossNodeBoundary> crossings = cross_node_boundaries(topology, node_of_rank);
  const int boundaries = (topology.stages() - 1) * topology.replicas();
  std::set<int> stages_crossing;
  for (const CrossNodeBoundary& crossing : crossings) stages_crossing.insert(crossing.stage);
  std::string which;
  for (int stage : stages_crossing) which += cat(which.empty() ? "" : ", ", stage, "->", stage + 1);
  lines.push_back(cat("pipeline: ", crossings.size(), " of ", boundaries, " stage boundaries cross nodes",
                      crossings.empty() ? "" : cat(" (", which, ")")));
  return lines;
}

}  // namespace zt
