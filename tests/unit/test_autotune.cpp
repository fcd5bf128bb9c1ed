// Unit tests of train/autotune.h: the search's pruning by predicted memory (a branch stops at
// its first micro-batch over the budget), DeepSpeed's fast mode (a branch stops once its
// throughput falls or gains less than 5%), the choice of the fastest, and the message when
// nothing fits; with made-up predictions and throughputs (the real runs are tested by
// tests/mpi/test_autotune.py and tests/gpu/test_gpu_autotune.py).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "train/autotune.h"
#include "train/memory_model_choices.h"

namespace {

// A need of 100 + 10 * micro-batch per stage below 3, 50 + 10 * micro-batch at stage 3, +1 with
// checkpointing off; throughput grows with the micro-batch up to `peak`, then falls.
int64_t need(const zt::AutotuneExperiment& e) {
  return (e.choice.stage == 3 ? 50 : 100) + 10 * e.micro_batch + (e.choice.activation_checkpointing ? 0 : 1);
}

struct Runs {
  int64_t peak = 4;
  std::vector<std::string> ran;
  void operator()(zt::AutotuneExperiment& e) {
    ran.push_back(e.name);
    e.ran = true;
    const double mb = static_cast<double>(e.micro_batch);
    e.samples_per_sec = (e.micro_batch <= peak ? mb : 2.0 * static_cast<double>(peak) - mb) +
                        (e.choice.stage == 3 ? 0.5 : 0.0);
    e.measured_bytes = need(e);
  }
};

BOOST_AUTO_TEST_SUITE(autotune)

BOOST_AUTO_TEST_CASE(prunes_by_budget_and_stops_in_fast_mode) {
  zt::AutotuneSearch search;
  search.branches = {{0, false, false, false}, {3, true, false, true}};
  search.max_micro_batch = 64;
  search.budget_bytes = 150;
  Runs runs;
  const auto experiments = zt::autotune(search, need, std::ref(runs));
  // Stage 0: micro-batch 1 (111), 2 (121), 4 (141) fit, 8 (181) is over: pruned, nothing larger tried.
  // Stage 3: 1, 2, 4 (90), 8 (130) run; 8 is past the throughput peak (4): the branch stops there.
  const std::vector<std::string> expected = {"z0_oonone_opnone_acF_gas1_tmbspg1", "z0_oonone_opnone_acF_gas1_tmbspg2",
                                             "z0_oonone_opnone_acF_gas1_tmbspg4", "z3_oocpu_opnone_acT_gas1_tmbspg1",
                                             "z3_oocpu_opnone_acT_gas1_tmbspg2", "z3_oocpu_opnone_acT_gas1_tmbspg4",
                                             "z3_oocpu_opnone_acT_gas1_tmbspg8"};
  BOOST_TEST(runs.ran == expected, boost::test_tools::per_element());
  BOOST_REQUIRE(experiments.size() == 8u);
  BOOST_TEST(experiments[3].pruned);
  BOOST_TEST(experiments[3].name == "z0_oonone_opnone_acF_gas1_tmbspg8");
  BOOST_TEST(!experiments[3].ran);
  const zt::AutotuneExperiment* best = zt::fastest_experiment(experiments);
  BOOST_REQUIRE(best);
  BOOST_TEST(best->name == "z3_oocpu_opnone_acT_gas1_tmbspg4");  // 4.5 samples/s
  for (const auto& e : experiments)
    if (e.ran) BOOST_TEST(e.samples_per_sec <= best->samples_per_sec);
  const std::string table = zt::format_autotune_table(experiments);
  BOOST_TEST(table.find("over budget") != std::string::npos, table);
  BOOST_TEST(table.find("* fastest: z3_oocpu_opnone_acT_gas1_tmbspg4") != std::string::npos, table);
}

BOOST_AUTO_TEST_CASE(table_columns_stay_aligned_for_long_names) {
  // A pipeline experiment's name and setting are longer than the others (e.g. "..._pp2"): every row
  // of the table is as long as the header, so the figures stand in their columns.
  std::vector<zt::AutotuneExperiment> experiments(2);
  experiments[0].name = "z1_oonone_opnone_acF_gas1_tmbspg1";
  experiments[1].name = "z1_oocpu_opnone_acT_gas16_tmbspg128_pp2_a_longer_name_than_the_column";
  for (auto& e : experiments) {
    e.ran = true;
    e.samples_per_sec = 1.5;
    e.predicted_bytes = e.measured_bytes = 123456789;
  }
  const std::string table = zt::format_autotune_table(experiments);
  std::vector<size_t> lengths;
  for (size_t start = 0, end; (end = table.find('\n', start)) != std::string::npos; start = end + 1)
    if (table.compare(start, 9, "* fastest") != 0) lengths.push_back(end - start);
  BOOST_REQUIRE(lengths.size() == 3u);
  BOOST_TEST((lengths[1] == lengths[0] && lengths[2] == lengths[0]), table);
}

BOOST_AUTO_TEST_CASE(small_gains_end_a_branch_and_no_fast_tries_all) {
  zt::AutotuneSearch search;
  search.branches = {{2, false, false, false}};
  search.max_micro_batch = 16;
  // Throughput 10, 10.2 (+2%: below DeepSpeed's 5%), ...: fast mode stops after micro-batch 2.
  std::vector<double> throughput = {10.0, 10.2, 20.0, 30.0, 40.0};
  size_t index = 0;
  const auto run = [&](zt::AutotuneExperiment& e) {
    e.ran = true;
    e.samples_per_sec = throughput[index++];
  };
  BOOST_TEST(zt::autotune(search, need, run).size() == 2u);
  search.fast = false;
  index = 0;
  const auto all = zt::autotune(search, need, run);
  BOOST_TEST(all.size() == 5u);  // 1, 2, 4, 8, 16
  BOOST_TEST(zt::fastest_experiment(all)->micro_batch == 16);
}

BOOST_AUTO_TEST_CASE(nothing_fits_names_the_smallest_need) {
  zt::AutotuneSearch search;
  search.branches = {{0, false, false, false}, {3, true, true, true}};
  search.budget_bytes = 40;
  Runs runs;
  const auto experiments = zt::autotune(search, need, std::ref(runs));
  BOOST_TEST(runs.ran.empty());
  BOOST_TEST(experiments.size() == 2u);  // each branch's micro-batch 1, pruned
  BOOST_TEST(!zt::fastest_experiment(experiments));
  const std::string message = zt::nothing_fits_message(experiments, 40);
  BOOST_TEST(message.find("the smallest need is") != std::string::npos, message);
  BOOST_TEST(message.find("(60 bytes: zero_optimization.stage 3 + offload_optimizer cpu + offload_param cpu + "
                          "--activation-checkpointing, micro-batch 1)") != std::string::npos,
             message);
}

// ZeRO++ as a search branch (several nodes): DeepSpeed's three keys at stage 3, hpZ over the node's
// ranks, named apart; below stage 3 a --deepspeed's ZeRO++ is dropped (it is stage 3's).
BOOST_AUTO_TEST_CASE(a_zeropp_branch_sets_the_three_keys) {
  zt::ZeroChoice choice{3, false, false, false};
  choice.zeropp_ranks_per_node = 8;
  const zt::TrainConfig config = zt::with_choice(zt::TrainConfig(), choice);
  BOOST_TEST((config.zero.zero_quantized_weights && config.zero.zero_quantized_gradients));
  BOOST_TEST((config.zero.zero_hpz_partition_size == 8 && config.zero.ranks_per_node == 8));
  BOOST_TEST(zt::choice_experiment_name(choice, 1, 2) == "z3_oonone_opnone_acF_gas1_tmbspg2_zpp");
  BOOST_TEST(zt::choice_text(choice) == "zero_optimization.stage 3 + ZeRO++ (hpZ over 8 ranks)");
  zt::TrainConfig zeropp = config;
  const zt::TrainConfig stage2 = zt::with_choice(zeropp, {2, false, false, false});
  BOOST_TEST((!stage2.zero.zero_quantized_weights && !stage2.zero.zero_quantized_gradients &&
              stage2.zero.zero_hpz_partition_size == 1));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
