// Samples during training (`train --sample-prompts FILE [--sample-every N]`): every N optimizer
// steps and after the last one, greedy completions of a few prompts with the model as it stands
// (LoRA adapters applied), printed on rank 0's console and appended to OUT/samples.jsonl
// ({"step", "prompt", "completion", "completion_ids", "stop"} per prompt), the quick look at the
// model that DeepSpeed-Chat's chat.py gives after step 1. Every rank runs the same generation
// forwards in lockstep (ZeRO-3 gathers parameters inside them; each chosen token is rank 0's).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "data/tokenizer.h"
#include "model/causal_lm.h"
#include "model/config.h"

namespace zt {

struct SampleOptions {
  std::string prompts_file;     // --sample-prompts; empty: no samples
  int64_t every = 0;            // --sample-every: every N steps (0: after the last step only)
  int64_t max_new_tokens = 64;  // --sample-max-new-tokens
  bool enabled() const { return !prompts_file.empty(); }
};

// The flags' own consistency (before anything is loaded): errors name the flag.
void check_sample_options(const SampleOptions& options, bool sample_every_given);

// The prompts of FILE: JSON Lines when its first non-blank line starts with '{' (each line an
// object with a string "prompt", as prep's input rows have), else one prompt per line (blank lines
// skipped). A missing file, a line without "prompt" or no prompt at all is an error naming it.
std::vector<std::string> read_sample_prompts(const std::string& path);

class TrainingSamples {
 public:
  // Reads and tokenizes the prompts with the model directory's tokenizer (BOS first, as prep does).
  TrainingSamples(const SampleOptions& options, const std::string& model_dir, const ModelConfig& config,
                  const std::string& out_dir, bool leader);
  // After `steps_done` of `total_steps`: every N steps and after the last.
  bool due(int64_t steps_done, int64_t total_steps) const;
  // Generates for every prompt; collective over `comm` (every rank calls it with the same model).
  // Rank 0 writes OUT/samples.jsonl and tells `say` each completion.
  void run(int64_t steps_done, CausalLM& model, Backend& backend, DType dtype, Communicator& comm,
           const std::function<void(const std::string&)>& say);

 private:
  SampleOptions options_;
  ModelConfig config_;
  std::string samples_path_;  // OUT/samples.jsonl
  bool leader_ = false;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::string> prompts_;
  std::vector<std::vector<int32_t>> prompt_ids_;
  std::vector<int64_t> stop_ids_;
};

}  // namespace zt
