// KV-cached generation on the CUDA backend (on the emulated device in CI): the cached logits of a
// greedy generation equal a full forward's on the same backend for LLaMA (GQA), Qwen2 and OPT
// (tests/unit/generation_check.h; the CPU backend runs the same check in unit.generation), and the
// tokens equal the CPU backend's. The attention over a cache itself is in the op checks
// (backend/op_checks.cpp "attention_cached", gpu.op_checks).
#include <boost/test/unit_test.hpp>

#include "generation_check.h"
#include "gpu_test_util.h"

namespace {

using namespace zt;

BOOST_AUTO_TEST_SUITE(generation)

BOOST_AUTO_TEST_CASE(cached_logits_equal_a_full_forward) {
  for (const char* family : {"llama", "qwen2", "opt"})
    test::check_cached_generation_matches_full_forward(gpu_test::gpu(), family);
}

BOOST_AUTO_TEST_CASE(tokens_equal_the_cpu_backend_s) {
  for (const char* family : {"llama", "opt"}) {
    const ModelConfig config = test::generation_family_config(family);
    const std::vector<ParamSpec> specs = model_param_specs(config);
    std::vector<int32_t> tokens[2];
    Backend* backends[2] = {&gpu_test::cpu(), &gpu_test::gpu()};
    for (int i = 0; i < 2; ++i) {
      ParamStore store(*backends[i], specs, std::vector<bool>(specs.size(), false));
      test::randomise_store(store, 11);
      std::unique_ptr<CausalLM> model = make_causal_lm(config, store, *backends[i], ModelOptions{});
      GenerationOptions options;
      options.max_new_tokens = 8;
      tokens[i] = generate(*model, config, *backends[i], DType::F32, {2, 9, 30}, options).tokens;
    }
    BOOST_TEST(tokens[1] == tokens[0], family << ": the CUDA backend generated other tokens than the CPU backend");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
