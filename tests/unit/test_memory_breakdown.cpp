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
#include "model/config.h"
#include "test_util.h"
#include "train/memory_model.h"
#include "train/memory_model_choices.h"

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

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
