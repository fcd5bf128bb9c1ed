// Unit tests of resuming on another number of ranks (train/resume_batch.h): the accumulation that
// keeps a checkpoint's train_batch_size, the refusals naming the arithmetic and the flags that
// would work, and the flags themselves.
#include <boost/test/unit_test.hpp>

#include <string>

#include "core/error.h"
#include "train/resume_batch.h"

namespace {

// A checkpoint of `ranks` x micro-batch `micro` x accumulation `accumulation`.
zt::CheckpointBatch saved(int ranks, int64_t micro, int64_t accumulation) {
  zt::CheckpointBatch batch;
  batch.world_size = ranks;
  batch.micro_batch_size = micro;
  batch.gradient_accumulation_steps = accumulation;
  batch.train_batch_size = ranks * micro * accumulation;
  return batch;
}

zt::TrainConfig given(int64_t train_batch, int64_t micro, int64_t accumulation) {
  zt::TrainConfig config;
  config.train_batch_size = train_batch;
  config.micro_batch_size = micro;
  config.gradient_accumulation_steps = accumulation;
  return config;
}

// The message of the zt::Error `action` throws ("" when it does not).
template <class Action>
std::string refusal(Action action) {
  try {
    action();
  } catch (const zt::Error& error) {
    return error.what();
  }
  return "";
}

bool holds(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(resume_batch)

BOOST_AUTO_TEST_CASE(fewer_ranks_take_more_accumulation) {
  // The case: 8 ranks x micro 2 x accumulation 1 = 16, resumed on 4 ranks with micro 2.
  zt::TrainConfig config = given(0, 2, 0);
  const auto decision = zt::keep_checkpoint_batch(config, 4, false, saved(8, 2, 1), "ckpt");
  BOOST_REQUIRE(decision);
  BOOST_TEST(decision->gradient_accumulation_steps == 2);
  BOOST_TEST(config.gradient_accumulation_steps == 2);
  BOOST_TEST(decision->text == "4 ranks instead of 8: gradient_accumulation_steps 1 -> 2 keeps train_batch_size 16");
  BOOST_TEST(decision->record["gradient_accumulation_steps"] == 2);
  BOOST_TEST(decision->record["checkpoint_world_size"] == 8);
  BOOST_TEST(decision->record["train_batch_size"] == 16);
  config.resolve_batch_sizes(4);  // what the run then resolves
  BOOST_TEST(config.train_batch_size == 16);
  BOOST_TEST(config.micro_batch_size == 2);
}

BOOST_AUTO_TEST_CASE(more_ranks_take_less_accumulation) {
  zt::TrainConfig config = given(0, 2, 0);
  const auto decision = zt::keep_checkpoint_batch(config, 4, false, saved(2, 2, 4), "ckpt");
  BOOST_REQUIRE(decision);
  BOOST_TEST(decision->gradient_accumulation_steps == 2);
  BOOST_TEST(decision->text == "4 ranks instead of 2: gradient_accumulation_steps 4 -> 2 keeps train_batch_size 16");
}

BOOST_AUTO_TEST_CASE(nothing_to_decide_when_the_arithmetic_agrees) {
  zt::TrainConfig same = given(0, 2, 2);
  BOOST_TEST(!zt::keep_checkpoint_batch(same, 4, true, saved(4, 2, 2), "ckpt"));
  BOOST_TEST(same.gradient_accumulation_steps == 2);
  // A train_batch_size equal to the checkpoint's: DeepSpeed's derivation keeps it on any ranks.
  zt::TrainConfig total = given(16, 2, 0);
  BOOST_TEST(!zt::keep_checkpoint_batch(total, 2, false, saved(8, 2, 1), "ckpt"));
  BOOST_TEST(total.gradient_accumulation_steps == 0);
  // zerotune's defaults (micro 1, accumulation 1) on the checkpoint's 2 ranks.
  zt::TrainConfig defaults = given(0, 0, 0);
  BOOST_TEST(!zt::keep_checkpoint_batch(defaults, 2, false, saved(2, 1, 1), "ckpt"));
}

BOOST_AUTO_TEST_CASE(a_given_accumulation_is_not_overridden) {
  zt::TrainConfig config = given(0, 2, 1);
  const std::string message = refusal([&] { zt::keep_checkpoint_batch(config, 4, true, saved(8, 2, 1), "OUT/ckpt"); });
  BOOST_TEST(holds(message, "OUT/ckpt: the checkpoint was made with train_batch_size 16 (8 ranks x micro-batch 2 x "
                            "gradient_accumulation_steps 1)"));
  BOOST_TEST(holds(message, "this run's micro-batch 2 x gradient_accumulation_steps 1 x 4 ranks = 8"));
  BOOST_TEST(holds(message, "to keep train_batch_size 16 on 4 ranks, use --micro-batch-size 2 --grad-accum 2, "
                            "--micro-batch-size 4 --grad-accum 1 or --micro-batch-size 1 --grad-accum 4"));
  BOOST_TEST(config.gradient_accumulation_steps == 1);
}

BOOST_AUTO_TEST_CASE(a_given_train_batch_size_must_be_the_checkpoints) {
  zt::TrainConfig config = given(8, 0, 0);
  config.deepspeed_config_path = "ds.json";
  const std::string message = refusal([&] { zt::keep_checkpoint_batch(config, 4, false, saved(8, 2, 1), "ckpt"); });
  BOOST_TEST(holds(message, "this run sets train_batch_size 8 (ds.json): set it to 16 to resume"));
}

BOOST_AUTO_TEST_CASE(no_accumulation_divides) {
  // 2 ranks x micro 2 x 1 = 4 on 1 rank with micro 3: 4 is not a multiple of 3.
  zt::TrainConfig config = given(0, 3, 0);
  const std::string message = refusal([&] { zt::keep_checkpoint_batch(config, 1, false, saved(2, 2, 1), "ckpt"); });
  BOOST_TEST(holds(message, "this run's micro-batch 3 x gradient_accumulation_steps 1 x 1 rank = 3"));
  BOOST_TEST(holds(message, "no gradient_accumulation_steps keeps 4 with micro-batch 3 on 1 rank: use "
                            "--micro-batch-size 4 --grad-accum 1, --micro-batch-size 2 --grad-accum 2 or "
                            "--micro-batch-size 1 --grad-accum 4"));
  // 3 ranks cannot split 16 at all: the rank counts that can.
  zt::TrainConfig three = given(0, 2, 0);
  const std::string ranks = refusal([&] { zt::keep_checkpoint_batch(three, 3, false, saved(8, 2, 1), "ckpt"); });
  BOOST_TEST(holds(ranks, "on 3 ranks: no micro-batch and accumulation split train_batch_size 16 over 3 ranks"));
  BOOST_TEST(holds(ranks, "mpirun -np 1, 2 or 4"));
}

BOOST_AUTO_TEST_CASE(flags_prefer_the_runs_micro_batch) {
  BOOST_TEST(zt::flags_for_batch(16, 4, 2) ==
             "use --micro-batch-size 2 --grad-accum 2, --micro-batch-size 4 --grad-accum 1 or --micro-batch-size 1 --grad-accum 4");
  BOOST_TEST(zt::flags_for_batch(6, 6, 5) == "use --micro-batch-size 1 --grad-accum 1");
  BOOST_TEST(zt::flags_for_batch(12, 5, 1) ==
             "no micro-batch and accumulation split train_batch_size 12 over 5 ranks: resume on a number of ranks that "
             "divides it (mpirun -np 3, 4 or 6)");
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_named) {
  zt::TrainConfig config = given(0, 2, 0);
  BOOST_TEST(holds(refusal([&] { zt::keep_checkpoint_batch(config, 0, false, saved(2, 2, 1), "ckpt"); }),
                   "world size 0 must be >= 1"));
  zt::CheckpointBatch broken = saved(2, 2, 1);
  broken.train_batch_size = 0;
  BOOST_TEST(holds(refusal([&] { zt::keep_checkpoint_batch(config, 1, false, broken, "ckpt"); }),
                   "ckpt: the manifest records train_batch_size 0"));
}

BOOST_AUTO_TEST_SUITE_END()
