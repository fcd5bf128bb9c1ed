// Unit tests of the pipeline's layout (pipe/stage_partition.h, pipe/pipeline_topology.h): units
// over stages by DeepSpeed's partition methods (worked out by hand: the heaviest stage as light as
// possible, ties to the earlier stages), a tied head counting the embedding it holds, LoRA's
// trainable parameters, refusals; ranks over stages x replicas, and which stage boundaries cross
// nodes for a 2-node hostfile.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "pipe/pipeline_topology.h"
#include "pipe/stage_partition.h"
#include "test_util.h"

namespace {

using zt::ParamRole;
using zt::ParamSpec;

// A model of `layers` blocks: embedding [100, 10] (unit 0), per block one [10, 10] weight and a
// norm [10] (units 1..L), the final norm [10] and a head [100, 10] (unit L + 1), the head tied to
// the embedding when `tied`.
std::vector<ParamSpec> toy_model(int layers, bool tied) {
  std::vector<ParamSpec> specs{{"embed_tokens.weight", {100, 10}, ParamRole::Embedding, -1, "", 0, ""}};
  for (int layer = 0; layer < layers; ++layer) {
    specs.push_back({zt::cat("layers.", layer, ".proj.weight"), {10, 10}, ParamRole::Linear, layer, "proj", layer + 1, ""});
    specs.push_back({zt::cat("layers.", layer, ".norm.weight"), {10}, ParamRole::NormWeight, layer, "", layer + 1, ""});
  }
  specs.push_back({"norm.weight", {10}, ParamRole::NormWeight, -1, "", layers + 1, ""});
  specs.push_back({"lm_head.weight", {100, 10}, ParamRole::Embedding, -1, "", layers + 1,
                   tied ? "embed_tokens.weight" : ""});
  return specs;
}

std::vector<int64_t> weights_of(const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable,
                                const std::string& method) {
  return zt::unit_weights(zt::summarize_units(specs, trainable), zt::parse_partition_method(method, "test"));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pipe_partition)

BOOST_AUTO_TEST_CASE(uniform_splits_the_units_evenly_front_first) {
  const std::vector<int64_t> ten(10, 1);
  BOOST_TEST(zt::partition_units(ten, 1) == (std::vector<int>{0, 10}));
  BOOST_TEST(zt::partition_units(ten, 2) == (std::vector<int>{0, 5, 10}));
  BOOST_TEST(zt::partition_units(ten, 3) == (std::vector<int>{0, 4, 8, 10}));
  BOOST_TEST(zt::partition_units(ten, 4) == (std::vector<int>{0, 3, 6, 9, 10}));
  BOOST_TEST(zt::partition_units(ten, 10) == (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  zt::test::check_error([&] { zt::partition_units(ten, 11); }, "11 stages for a model of 10 units");
}

BOOST_AUTO_TEST_CASE(parameters_balance_the_heaviest_stage) {
  // 8 layers of 110, embedding 1000, head 1010: [emb + 4 layers = 1440 | 4 layers + head = 1450].
  const std::vector<ParamSpec> specs = toy_model(8, false);
  const std::vector<int64_t> weights = weights_of(specs, std::vector<bool>(specs.size(), true), "parameters");
  BOOST_TEST(weights == (std::vector<int64_t>{1000, 110, 110, 110, 110, 110, 110, 110, 110, 1010}));
  BOOST_TEST(zt::partition_units(weights, 2) == (std::vector<int>{0, 5, 10}));
  // 3 stages: the embedding alone (1000), 8 layers (880), the head alone (1010).
  BOOST_TEST(zt::partition_units(weights, 3) == (std::vector<int>{0, 1, 9, 10}));
  // Uneven weights where front-loading must stop early: [1, 1, 10] in 2 -> [1, 1 | 10].
  BOOST_TEST(zt::partition_units({1, 1, 10}, 2) == (std::vector<int>{0, 2, 3}));
  BOOST_TEST(zt::partition_units({10, 1, 1}, 2) == (std::vector<int>{0, 1, 3}));
}

BOOST_AUTO_TEST_CASE(a_tied_head_counts_the_embedding_it_holds) {
  const std::vector<ParamSpec> specs = toy_model(4, true);
  const std::vector<zt::UnitSummary> units = zt::summarize_units(specs, std::vector<bool>(specs.size(), true));
  BOOST_REQUIRE(units.size() == 6u);
  BOOST_TEST(units[0].type == "Embedding");
  BOOST_TEST(units[1].type == "DecoderLayer");
  BOOST_TEST(units[5].type == "Head");
  BOOST_TEST(units[5].parameters == 1010);  // its norm and the tied embedding's copy
  BOOST_TEST(units[5].trainable_parameters == 1010);
}

BOOST_AUTO_TEST_CASE(lora_counts_only_what_trains) {
  // The base frozen, one adapter-sized trainable weight per layer: the layers carry the weight,
  // the frozen embedding and head none, as DeepSpeed counts requires_grad parameters.
  std::vector<ParamSpec> specs = toy_model(4, true);
  std::vector<bool> trainable(specs.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) trainable[i] = specs[i].role == ParamRole::Linear;
  const std::vector<int64_t> weights = weights_of(specs, trainable, "parameters");
  BOOST_TEST(weights == (std::vector<int64_t>{0, 100, 100, 100, 100, 0}));
  BOOST_TEST(zt::partition_units(weights, 2) == (std::vector<int>{0, 3, 6}));
}

BOOST_AUTO_TEST_CASE(type_regex_balances_the_matching_units) {
  const std::vector<ParamSpec> specs = toy_model(8, false);
  const std::vector<bool> all(specs.size(), true);
  const std::vector<int64_t> decoder = weights_of(specs, all, "type:decoder");
  BOOST_TEST(decoder == (std::vector<int64_t>{0, 1, 1, 1, 1, 1, 1, 1, 1, 0}));
  BOOST_TEST(zt::partition_units(decoder, 2) == (std::vector<int>{0, 5, 10}));
  BOOST_TEST(weights_of(specs, all, "type:^(embedding|head)$") == (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  zt::test::check_error([&] { weights_of(specs, all, "type:transformer"); },
                        "'type:transformer' matches no unit (their types: Embedding, DecoderLayer, Head)");
  zt::test::check_error([] { zt::parse_partition_method("type:", "ds.json pipeline.partition_method"); },
                        "ds.json pipeline.partition_method: partition_method 'type:' needs a pattern");
  zt::test::check_error([] { zt::parse_partition_method("type:(", "ds.json pipeline.partition_method"); },
                        "ds.json pipeline.partition_method: partition_method 'type:('");
  zt::test::check_error([] { zt::parse_partition_method("profile", "--pipeline-partition"); },
                        "--pipeline-partition: unknown partition_method 'profile'");
}

BOOST_AUTO_TEST_CASE(ranks_split_into_stages_of_consecutive_ranks) {
  const zt::PipelineTopology topology(8, 2);
  BOOST_TEST(topology.replicas() == 4);
  BOOST_TEST(topology.stage_of(5) == 1);
  BOOST_TEST(topology.replica_of(5) == 1);
  BOOST_TEST(topology.stage_ranks(1) == (std::vector<int>{4, 5, 6, 7}));
  BOOST_TEST(topology.replica_ranks(1) == (std::vector<int>{1, 5}));
  BOOST_TEST(topology.next_rank(1) == 5);
  BOOST_TEST(topology.previous_rank(5) == 1);
  BOOST_TEST(topology.next_rank(5) == -1);
  BOOST_TEST(topology.previous_rank(2) == -1);
  zt::test::check_error([] { zt::PipelineTopology(8, 3); }, "3 stages do not divide the 8 ranks");
  zt::test::check_error([] { zt::PipelineTopology(8, 0); }, "must be at least 1");
}

BOOST_AUTO_TEST_CASE(stage_boundaries_cross_nodes_only_at_a_node_end) {
  const std::vector<std::string> nodes{"a", "a", "a", "a", "b", "b", "b", "b"};
  // P=2 on two nodes of 4: each stage is a node, every replica's boundary crosses.
  BOOST_TEST(zt::cross_node_boundaries(zt::PipelineTopology(8, 2), nodes).size() == 4u);
  // P=4, D=2: stages 0, 1 on a, 2, 3 on b: only 1->2 crosses, for both replicas.
  const zt::PipelineTopology four(8, 4);
  const std::vector<zt::CrossNodeBoundary> crossings = zt::cross_node_boundaries(four, nodes);
  BOOST_REQUIRE(crossings.size() == 2u);
  BOOST_TEST(crossings[0].stage == 1);
  BOOST_TEST(crossings[0].from_rank == 2);
  BOOST_TEST(crossings[0].to_rank == 4);
  const std::vector<std::string> lines = zt::describe_topology(four, nodes);
  BOOST_REQUIRE(lines.size() == 6u);
  BOOST_TEST(lines[0] == "pipeline: 4 stages x 2 data-parallel replicas (rank r: stage r / 2, replica r % 2)");
  BOOST_TEST(lines[1] == "pipeline: stage 0: ranks 0-1 on a");
  BOOST_TEST(lines[5] == "pipeline: 2 of 6 stage boundaries cross nodes (1->2)");
  // One node: nothing crosses.
  BOOST_TEST(zt::cross_node_boundaries(four, std::vector<std::string>(8, "a")).empty());
}

BOOST_AUTO_TEST_SUITE_END()
