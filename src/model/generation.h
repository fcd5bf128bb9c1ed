// Generation with a key/value cache (model/kv_cache.h), as HF's generate does for a causal LM:
// the prompt runs once (prefill), then one token at a time, each chosen from the last logits by
// greedy argmax (temperature 0, the default) or by sampling at a temperature within the top-p
// nucleus, until a stop token (the model's EOS) or max_new_tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/causal_lm.h"
#include "model/config.h"

namespace zt {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;       // 0: greedy; > 0: sample from softmax(logits / temperature)
  double top_p = 1.0;             // nucleus: sample among the most likely tokens whose mass reaches top_p
  uint64_t seed = 0;              // sampling's counter-based random numbers (RngPurpose::Sampling)
  uint32_t sequence = 0;          // which sequence of a run this is (its own random numbers)
  std::vector<int64_t> stop_ids;  // generation ends at the first of these (not included in the output)
};

// The ids generation stops at, as HF's generate takes them: generation_config.json's
// eos_token_id (an id or a list) when `model_dir` has that file and key, else config.json's
// (config.eos_token_ids); empty when neither names one.
std::vector<int64_t> stop_token_ids(const ModelConfig& config, const std::string& model_dir);

// Throws a zt::Error naming the flag (--max-new-tokens, --temperature, --top-p) of a bad value.
void check_generation_options(const GenerationOptions& options);

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens, without the stop token
  bool stopped = false;         // ended at a stop token (else at max_new_tokens)
};

// Optional hooks: `agree` maps each chosen token to the one every rank uses (multi-rank runs:
// rank 0's, so that ranks stay in lockstep through ZeRO-3's gathers); `on_logits` sees the fp32
// logits [V] each token was chosen from (tests).
struct GenerationHooks {
  std::function<int32_t(int32_t token)> agree;
  std::function<void(const std::vector<float>& logits)> on_logits;
};

// Generates after `prompt` (at least one token) with `model` (whose compute dtype is `dtype`).
// The sequence must fit the model's positions: prompt + max_new_tokens <= max_position_embeddings.
Generation generate(CausalLM& model, const ModelConfig& config, Backend& backend, DType dtype,
                    const std::vector<int32_t>& prompt, const GenerationOptions& options,
                    const GenerationHooks& hooks = {});

// The next token from logits[V]: the first argmax when temperature is 0, else a draw from the
// top-p nucleus of softmax(logits / temperature) with uniform number `uniform` in [0, 1)
// (HF's TopPLogitsWarper: the most likely tokens whose cumulative probability reaches top_p,
// at least one).
int32_t choose_token(const std::vector<float>& logits, double temperature, double top_p, float uniform);

}  // namespace zt
