// Generation with a key/value cache (generation.h).
#include "model/generation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "backend/buffer.h"
#include "core/error.h"
#include "core/rng.h"
#include <nlohmann/json.hpp>
#include "model/kv_cache.h"

namespace zt {

std::vector<int64_t> stop_token_ids(const ModelConfig& config, const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "generation_config.json";
  std::ifstream in(path);
  if (in) {
    nlohmann::json generation_config;
    try {
      generation_config = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& error) {
      fail(path.string(), ": invalid JSON: ", error.what());
    }
    const nlohmann::json eos = generation_config.value("eos_token_id", nlohmann::json());
    if (eos.is_number_integer()) return {eos.get<int64_t>()};
    if (eos.is_array()) {
      std::vector<int64_t> ids;
      for (const nlohmann::json& id : eos) {
        ZT_CHECK(id.is_number_integer(), path.string(), ": eos_token_id must hold integers, got ", id.dump());
        ids.push_back(id.get<int64_t>());
      }
      return ids;
    }
  }
  return std::vector<int64_t>(config.eos_token_ids.begin(), config.eos_token_ids.end());
}

void check_generation_options(const GenerationOptions& options) {
  ZT_CHECK(options.max_new_tokens > 0, "--max-new-tokens must be at least 1, got ", options.max_new_tokens);
  ZT_CHECK(std::isfinite(options.temperature) && options.temperature >= 0.0,
           "--temperature must be >= 0 (0: greedy), got ", options.temperature);
  ZT_CHECK(std::isfinite(options.top_p) && options.top_p > 0.0 && options.top_p <= 1.0,
           "--top-p must be in (0, 1] (1: no nucleus cut), got ", options.top_p);
}

int32_t choose_token(const std::vector<float>& logits, double temperature, double top_p, float uniform) {
  ZT_CHECK(!logits.empty(), "no logits to choose a token from");
  if (temperature == 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Probabilities of softmax(logits / temperature), in double, most likely first.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double top = logits[static_cast<size_t>(order.front())] / temperature;
  std::vector<double> probability(order.size());
  double total = 0.0;
  for (size_t i = 0; i < order.size(); ++i) total += probability[i] = std::exp(logits[static_cast<size_t>(order[i])] / temperature - top);
  // The nucleus: the shortest prefix whose mass reaches top_p (at least one token).
  size_t kept = 0;
  double mass = 0.0;
  while (kept < order.size() && (kept == 0 || mass < top_p * total)) mass += probability[kept++];
  double target = static_cast<double>(uniform) * mass;
  for (size_t i = 0; i < kept; ++i) {
    target -= probability[i];
    if (target < 0.0) return order[i];
  }
  return order[kept - 1];
}

namespace {

// The logits [1, V] of the model (compute dtype, on the device) as fp32 on the host.
std::vector<float> host_logits(Backend& backend, Tensor logits) {
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  backend.copy(Tensor(host.data(), DType::F32, {logits.numel()}), logits.reshaped({logits.numel()}));
  return host;
}

}  // namespace

Generation generate(CausalLM& model, const ModelConfig& config, Backend& backend, DType dtype,
                    const std::vector<int32_t>& prompt, const GenerationOptions& options, const GenerationHooks& hooks) {
  check_generation_options(options);
  ZT_CHECK(!prompt.empty(), "the prompt has no tokens: generation needs at least one");
  const int64_t prompt_length = static_cast<int64_t>(prompt.size());
  check_sequence_length(config, prompt_length + options.max_new_tokens,
                        cat("a prompt of ", prompt_length, " tokens + --max-new-tokens ", options.max_new_tokens));
  KvCache cache(backend, config, dtype, prompt_length + options.max_new_tokens);
  Buffer ids(backend, static_cast<size_t>(prompt_length) * sizeof(int32_t));  // int32 [prompt]: the step's input ids
  backend.copy(ids.view(DType::I32, {prompt_length}), Tensor(const_cast<int32_t*>(prompt.data()), DType::I32, {prompt_length}));
  Tensor logits = model.forward_cached(ids.view(DType::I32, {prompt_length}), cache);  // prefill
  const RngKey key{options.seed, rng_stream(RngPurpose::Sampling, options.sequence), 0};
  Generation generation;
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const std::vector<float> host = host_logits(backend, logits);
    if (hooks.on_logits) hooks.on_logits(host);
    int32_t token = choose_token(host, options.temperature, options.top_p, rng_uniform(key, static_cast<uint64_t>(step)));
    if (hooks.agree) token = hooks.agree(token);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
      generation.stopped = true;
      break;
    }
    generation.tokens.push_back(token);
    if (step + 1 == options.max_new_tokens) break;  // no forward for a token nobody reads
    Tensor next = ids.view(DType::I32, {1});
    backend.copy(next, Tensor(&token, DType::I32, {1}));
    logits = model.forward_cached(next, cache);
  }
  return generation;
}

}  // namespace zt
