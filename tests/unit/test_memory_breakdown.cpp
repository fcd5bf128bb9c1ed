// Unit tests of the memory model's breakdown by term (train/memory_model.h, the counting
// backend's terms) and of what `zerotune estimate` builds on it (issue 20): the terms add up to
// the peak; the logits are [B*T, V] in the compute dtype; checkpointing shrinks the activations
// and nothing else that is whole; parameter offload moves the parameters to the host;
// longest_fitting_sequence's answer fits and one more token does not; estimate's new options'
// input errors.
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "backend/attention_scratch_rules.h"
#include "cli/commands.h"
#include "data/packing.h"
#include "model/config.h"
#include "test_util.h"
#include "train/memory_model.h"
#include "train/memory_model_choices.h"
#include "train/metrics.h"

namespace {

using zt::test::check_error;
using Args = std::vector<std::string>;

zt::ModelConfig tiny() { return zt::load_model_config(std::string(ZT_SOURCE_DIR) + "/data/tiny-llama/config.json"); }

zt::TrainConfig config(int stage, bool offload_optimizer, bool offload_params, bool checkpointing) {
  zt::TrainConfig c;
  c.micro_batch_size = 2;
  c.gradient_accumulation_steps = 1;
  c.compute_dtype = zt::DType::BF16;
  c.head_chunk_rows = int64_t{1} << 30;  // the LM head in one chunk: the logits term is [B*T, V]
  return zt::with_choice(c, {stage, offload_optimizer, offload_params, checkpointing});
}

int64_t sum(const std::map<std::string, int64_t>& terms) {
  int64_t total = 0;
  for (const auto& [term, bytes] : terms) total += bytes;
  return total;
}

int64_t term(const zt::MemoryPrediction& p, const char* name) {
  auto found = p.device_terms.find(name);
  return found == p.device_terms.end() ? 0 : found->second;
}

BOOST_AUTO_TEST_SUITE(memory_breakdown)

BOOST_AUTO_TEST_CASE(terms_add_up_and_name_what_they_hold) {
  const zt::ModelConfig model = tiny();
  const int64_t seq = 64, batch = 2;
  for (const zt::ZeroChoice& choice : zt::zero_offload_choices(false)) {
    for (bool checkpointing : {false, true}) {
      const zt::TrainConfig c = config(choice.stage, choice.offload_optimizer, choice.offload_params, checkpointing);
      const zt::MemoryPrediction p = zt::predict_memory(c, model, 2, 0, seq, zt::typical_gpu_target());
      const std::string what = zt::choice_text({choice.stage, choice.offload_optimizer, choice.offload_params, checkpointing});
      BOOST_TEST(sum(p.device_terms) == p.device_peak, what);
      BOOST_TEST(sum(p.host_terms) == p.host_peak, what);
      // The logits: [B*T, V] bf16 (one head chunk), rounded up by the allocator's size class (its slack is a
      // term of its own).
      BOOST_TEST(term(p, zt::kTermLogits) == batch * seq * model.vocab_size * 2, what);
      BOOST_TEST(term(p, zt::kTermActivations) > 0, what);
      BOOST_TEST(term(p, zt::kTermBackendFixed) > 0, what);  // the cuBLASLt workspace
      // Gradients are held at the peak unless it comes in the forward (stage 3 with its parameters
      // offloaded: the gathered units peak before the first gradient is committed).
      if (!choice.offload_params) BOOST_TEST(term(p, zt::kTermGradients) > 0, what);
      if (choice.offload_params) {  // the partitions on the host (units under stage3_param_persistence_threshold
                                    // stay whole on the device: every unit of this tiny model)
        BOOST_TEST(p.host_terms.at(zt::kTermParameters) > 0, what);
      } else {
        BOOST_TEST(term(p, zt::kTermParameters) > 0, what);
      }
      if (choice.offload_optimizer) {
        BOOST_TEST(term(p, zt::kTermOptimizerState) == 0, what);
        BOOST_TEST(p.host_terms.at(zt::kTermOptimizerState) > 0, what);
        BOOST_TEST(p.host_terms.at(zt::kTermMaster) > 0, what);
      } else {
        BOOST_TEST(term(p, zt::kTermOptimizerState) > 0, what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(checkpointing_shrinks_the_activations) {
  const zt::ModelConfig model = tiny();
  for (int stage : {0, 3}) {
    const zt::MemoryPrediction off = zt::predict_memory(config(stage, false, false, false), model, 1, 0, 128,
                                                        zt::typical_gpu_target());
    const zt::MemoryPrediction on = zt::predict_memory(config(stage, false, false, true), model, 1, 0, 128,
                                                       zt::typical_gpu_target());
    BOOST_TEST(term(on, zt::kTermActivations) < term(off, zt::kTermActivations));
    BOOST_TEST(term(on, zt::kTermLogits) == term(off, zt::kTermLogits));
    BOOST_TEST(on.device_peak < off.device_peak);
  }
}

BOOST_AUTO_TEST_CASE(longest_fitting_sequence_is_the_edge) {
  const zt::ModelConfig model = tiny();
  const zt::TrainConfig c = config(2, false, false, false);
  const auto need = [&](int64_t seq) {
    return zt::predict_memory(c, model, 1, 0, seq, zt::typical_gpu_target()).device_needed();
  };
  const int64_t budget = (need(40) + need(41)) / 2 + (need(41) - need(40)) / 4;  // between 40 and 41 tokens, or near
  const int64_t longest = zt::longest_fitting_sequence(c, model, 1, zt::typical_gpu_target(), budget, 128);
  BOOST_TEST(longest >= 1);
  BOOST_TEST(need(longest) <= budget);
  if (longest < 128) BOOST_TEST(need(longest + 1) > budget);
  BOOST_TEST(zt::longest_fitting_sequence(c, model, 1, zt::typical_gpu_target(), need(1) - 1, 128) == 0);
  BOOST_TEST(zt::longest_fitting_sequence(c, model, 1, zt::typical_gpu_target(), int64_t{1} << 40, 128) == 128);
}

BOOST_AUTO_TEST_CASE(estimate_max_seq_len_input_errors) {
  const std::string model = std::string(ZT_SOURCE_DIR) + "/data/tiny-llama";
  check_error([&] { zt::command_estimate(Args{"--model", model, "--max-seq-len"}); },
              "--max-seq-len needs --model (the activations come from its layers) and --device-memory");
  check_error([&] { zt::command_estimate(Args{"--params", "7e9", "--max-seq-len", "--device-memory", "24GiB"}); },
              "--max-seq-len needs --model");
  check_error([&] { zt::command_estimate(Args{"--model", model, "--device-memory", "24GiB"}); },
              "--device-memory goes with --max-seq-len");
  check_error([&] { zt::command_estimate(Args{"--model", model, "--max-seq-len", "--device-memory", "24 parsecs"}); },
              "--device-memory '24 parsecs'");
  check_error([&] { zt::command_estimate(Args{"--model", model, "--device", "tpu"}); },
              "--device must be typical-gpu, cuda or cpu, not 'tpu'");
  check_error([&] { zt::command_estimate(Args{"--model", model, "--deepspeed", "/nonexistent/ds.json"}); },
              "/nonexistent/ds.json");
}

// The typical GPU counts the CUDA attention's scratch (backend/attention_scratch_rules.h) in every
// build: with bf16 (cuDNN) the step's peak is the backward attention's, which holds the ragged
// index arrays the backend keeps (the model's rows always carry positions: one sample per row),
// the THD stats and the graph's workspace (cudnn-frontend's fp32 softmax sum, the plan's
// allowance and the deterministic engine's dS, B x H x 128 x 128 x 2 here); with fp32 our
// kernels' delta [B, H, T] at most.
BOOST_AUTO_TEST_CASE(attention_workspace_is_counted_on_a_typical_gpu) {
  const zt::ModelConfig model = tiny();
  const int64_t seq = 128, batch = 2, heads = model.num_attention_heads;
  zt::TrainConfig c = config(0, false, false, false);
  const zt::MemoryPrediction cudnn = zt::predict_memory(c, model, 1, 0, seq, zt::typical_gpu_target());
  const int64_t rows = batch * heads * seq * 4;  // fp32 [B, H, T]
  const int64_t workspace = rows + zt::kCudnnPlanWorkspaceAllowance + batch * heads * seq * seq * 2;
  BOOST_TEST(term(cudnn, zt::kTermAttentionWorkspace) == (4 * batch + 3) * 4 + rows + workspace);
  c.compute_dtype = zt::DType::F32;
  const zt::MemoryPrediction kernels = zt::predict_memory(c, model, 1, 0, seq, zt::typical_gpu_target());
  BOOST_TEST(term(kernels, zt::kTermAttentionWorkspace) <= rows);
}

// --packing (issue 29): cuDNN buckets a packed call's graph to B' = rows x a power of two of
// sequences (the padding after a row's samples is one) and S' = a power of two of tokens
// (cuda_attention_cudnn.cpp calls the same cudnn_ragged_* functions); the model counts the worst
// micro-batch the data's bound allows, not one sample per row.
BOOST_AUTO_TEST_CASE(packed_rows_bucket_as_cudnn_does) {
  BOOST_TEST(zt::cudnn_ragged_batch(9, 2) == 16);   // ceil(9/2) = 5 -> 8 per row
  BOOST_TEST(zt::cudnn_ragged_batch(4, 4) == 4);
  BOOST_TEST(zt::cudnn_ragged_time(1000, 2048) == 1024);
  BOOST_TEST(zt::cudnn_ragged_time(1025, 2048) == 2048);
  BOOST_TEST(zt::cudnn_ragged_time(20, 2048) == 64);
  BOOST_TEST(zt::cudnn_ragged_time(60, 40) == 40);
  // 4 samples of varied length: 2 rows of 5 sequences or 4 of 7 give 8; one row of 4 gives 4.
  BOOST_TEST(zt::worst_ragged_batch(zt::packed_rows_bound(4, 20, 200), 4) == 8);
  BOOST_TEST(zt::worst_ragged_batch(zt::packed_rows_bound(4, 20, 200), 1) == 4);
  // 9 samples in 7 rows, 6 of them padded, 15 sequences -> 7 x 4 = 28, more than 9 rows' 18 (first-fit
  // decreasing packs 100 | 95 | 94 | 93 | 92 | 91 | 60 20 10 so).
  BOOST_TEST(zt::worst_ragged_batch(zt::packed_rows_bound(9, 10, 100), 9) == 28);
  BOOST_TEST(zt::pack_first_fit_decreasing(std::vector<int64_t>{100, 95, 94, 93, 92, 91, 60, 20, 10}, 100).size() == 7);
  // Samples all as long as the row: one per row, no padding: B' = B. No --packing: B.
  BOOST_TEST(zt::worst_ragged_batch(zt::packed_rows_bound(4, 200, 200), 4) == 4);
  BOOST_TEST(zt::worst_ragged_batch(zt::PackedRows{}, 4) == 4);
  check_error([] { zt::packed_rows_bound(4, 0, 200); }, "packed rows: micro-batch 4 of samples of 0 to 200 tokens");
}

BOOST_AUTO_TEST_CASE(packed_attention_workspace_is_the_worst_micro_batch) {
  const zt::ModelConfig model = tiny();
  const int64_t seq = 128, batch = 4, heads = model.num_attention_heads;
  zt::TrainConfig c = config(0, false, false, false);
  c.micro_batch_size = batch;
  c.packing = true;
  // The backward's scratch with B' sequences of 128 tokens: index arrays, THD stats [B*T, H],
  // the softmax sum [B', H, T], the plan's allowance and dS [B', H, 128, 128] bf16.
  const auto workspace = [&](int64_t sequences) {
    return (4 * sequences + 3) * 4 + batch * seq * heads * 4 + sequences * heads * seq * 4 +
           zt::kCudnnPlanWorkspaceAllowance + sequences * heads * seq * seq * 2;
  };
  const auto predicted = [&](const zt::DataLengths& data) {
    return term(zt::predict_memory(c, model, 1, 0, seq, zt::typical_gpu_target(), data), zt::kTermAttentionWorkspace);
  };
  BOOST_TEST(predicted({0, 8}) == workspace(8));    // short samples beside a long one: twice the rows
  BOOST_TEST(predicted({}) == workspace(8));        // no data: samples of 1 token assumed
  BOOST_TEST(predicted({0, seq}) == workspace(4));  // every sample fills its row
  c.packing = false;
  BOOST_TEST(predicted({0, 8}) == workspace(4));    // one sample per row
  c.packing = true;
  // The refusal at the start of a run names packing and the figure (trainer.cpp).
  const zt::MemoryPrediction p = zt::predict_memory(c, model, 1, 0, seq, zt::typical_gpu_target(), {0, 8});
  const std::string note = zt::packed_attention_note(c, seq, {0, 8}, p);
  BOOST_TEST(note.find("--packing: " + zt::format_bytes(workspace(8)) + " of it is the attention workspace") !=
                 std::string::npos, note);
  BOOST_TEST(note.find("up to 8 sequences x 128 tokens per micro-batch (4 samples of 8 to 128 tokens") !=
                 std::string::npos, note);
  BOOST_TEST(zt::packed_rows_text(c, seq, {}).find("1 (assumed: no data given)") != std::string::npos);
  check_error([] { zt::command_estimate(Args{"--params", "7e9", "--packing"}); }, "--packing needs --model");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
