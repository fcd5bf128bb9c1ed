// The KV-cached generation against a full forward, on any backend (tests/unit/test_generation.cpp
// runs it on the CPU backend, tests/gpu/test_generation.cpp on the CUDA backend and so on the
// emulated device): a tiny random model of a family generates greedily after a prompt, and the
// logits each new token was chosen from (the prefill's last row, then each one-token step over the
// cache) must equal the logits of one forward pass without a cache over the same tokens, row by
// row, within fp32 reassociation; the generated tokens are those logits' argmaxes.
#pragma once
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/causal_lm.h"
#include "model/generation.h"
#include "model/param_spec.h"
#include "model/param_store.h"

namespace zt::test {

// The tiny models: LLaMA with grouped-query heads (4 query, 2 key/value), Qwen2 (q/k/v biases,
// tied head), OPT pre-LN with biases and learned positions.
inline ModelConfig generation_family_config(const std::string& family) {
  nlohmann::json json = {{"vocab_size", 64}, {"hidden_size", 32}, {"num_hidden_layers", 2},
                         {"num_attention_heads", 4}, {"max_position_embeddings", 32}};
  if (family == "llama") json.update({{"model_type", "llama"}, {"intermediate_size", 48}, {"num_key_value_heads", 2}});
  else if (family == "qwen2")
    json.update({{"model_type", "qwen2"}, {"intermediate_size", 48}, {"num_key_value_heads", 1}, {"tie_word_embeddings", true}});
  else json.update({{"model_type", "opt"}, {"ffn_dim", 48}, {"dropout", 0.0}, {"enable_bias", true}});
  return parse_model_config(json, "tiny-" + family);
}

// Random weights (norm weights around 1, the rest 0.3 N(0, 1)), written through the store so that
// any backend's store takes them.
inline void randomise_store(ParamStore& store, uint64_t seed) {
  uint32_t stream = 0;
  for (const ParamEntry& entry : store.entries()) {
    std::vector<float> values(static_cast<size_t>(entry.spec.numel()));
    const RngKey key{seed, rng_stream(RngPurpose::Test, stream++), 0};
    for (size_t i = 0; i < values.size(); ++i) {
      const float noise = rng_normal(key, i);
      values[i] = entry.spec.role == ParamRole::NormWeight ? 1.0f + 0.1f * noise : 0.3f * noise;
    }
    store.write_param(entry.spec.name, values.data());
  }
}

// The logits [rows, V] of one forward over `tokens` without a cache, as fp32 on the host.
inline std::vector<float> full_forward_logits(CausalLM& model, Backend& backend, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  Buffer ids(backend, tokens.size() * sizeof(int32_t));
  backend.copy(ids.view(DType::I32, {n}), Tensor(const_cast<int32_t*>(tokens.data()), DType::I32, {n}));
  BatchTensors batch;
  batch.batch = 1;
  batch.seq = n;
  batch.input_ids = ids.view(DType::I32, {n});
  DropoutContext no_dropout;
  no_dropout.training = false;
  model.keep_logits(true);
  const Tensor logits = model.forward(batch, no_dropout);
  model.keep_logits(false);
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  backend.copy(Tensor(host.data(), DType::F32, {logits.numel()}), logits.reshaped({logits.numel()}));
  return host;
}

// Generates 6 tokens after a 5-token prompt (twice on the same model: the second time over a
// fresh cache) and compares every step's logits with the full forward's row.
inline void check_cached_generation_matches_full_forward(Backend& backend, const std::string& family) {
  const ModelConfig config = generation_family_config(family);
  const std::vector<ParamSpec> specs = model_param_specs(config);
  ParamStore store(backend, specs, std::vector<bool>(specs.size(), false));
  randomise_store(store, 7);
  std::unique_ptr<CausalLM> model = make_causal_lm(config, store, backend, ModelOptions{});
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 63};
  GenerationOptions options;
  options.max_new_tokens = 6;
  std::vector<std::vector<float>> step_logits;
  GenerationHooks hooks;
  hooks.on_logits = [&](const std::vector<float>& logits) { step_logits.push_back(logits); };
  const Generation generation = generate(*model, config, backend, DType::F32, prompt, options, hooks);
  BOOST_REQUIRE_EQUAL(generation.tokens.size(), 6u);
  BOOST_REQUIRE_EQUAL(step_logits.size(), 6u);
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), generation.tokens.begin(), generation.tokens.end() - 1);  // the last one is never read
  const std::vector<float> full = full_forward_logits(*model, backend, tokens);
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  double worst = 0.0, scale = 0.0;
  for (size_t step = 0; step < step_logits.size(); ++step) {
    const float* row = full.data() + (prompt.size() - 1 + step) * vocab;  // the row that predicts new token `step`
    for (size_t v = 0; v < vocab; ++v) {
      worst = std::max(worst, static_cast<double>(std::fabs(step_logits[step][v] - row[v])));
      scale = std::max(scale, static_cast<double>(std::fabs(row[v])));
    }
    const int32_t argmax = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    BOOST_TEST(generation.tokens[step] == argmax, family << ": step " << step << " chose " << generation.tokens[step]
                                                         << ", the full forward's argmax is " << argmax);
  }
  BOOST_TEST(scale > 0.5, family << ": logits too small to tell anything apart (max |logit| " << scale << ")");
  BOOST_TEST(worst <= 2e-5 * (1.0 + scale), family << ": cached logits differ from the full forward's by " << worst
                                                    << " (max |logit| " << scale << ")");
  const Generation again = generate(*model, config, backend, DType::F32, prompt, options);
  BOOST_TEST(again.tokens == generation.tokens, family << ": a second generation on the same model differs");
}

}  // namespace zt::test
