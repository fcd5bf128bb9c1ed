// Samples during training (sampling.h).
#include "train/sampling.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/generation.h"

namespace zt {

namespace {

using json = nlohmann::json;

// JSON text with invalid UTF-8 (a character cut by the token limit, byte tokens) as U+FFFD, as HF's decode.
std::string utf8_dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// The "prompt" of JSON line `number` of `path`.
std::string prompt_of_json_line(const std::string& line, const std::string& path, int64_t number) {
  json row;
  try {
    row = json::parse(line);
  } catch (const json::exception& error) {
    fail(path, ":", number, ": not a JSON object (the file's first line is one, so every line must be): ", error.what());
  }
  ZT_CHECK(row.is_object() && row.contains("prompt") && row.at("prompt").is_string(), path, ":", number,
           ": a JSON line needs a string \"prompt\", got ", line.substr(0, 120));
  return row.at("prompt").get<std::string>();
}

}  // namespace

void check_sample_options(const SampleOptions& options, bool sample_every_given) {
  ZT_CHECK(options.enabled() || !sample_every_given, "--sample-every needs --sample-prompts FILE (the prompts to complete)");
  ZT_CHECK(options.every >= 0, "--sample-every must be >= 1 (or left out: samples after the last step only), got ",
           options.every);
  ZT_CHECK(!sample_every_given || options.every >= 1, "--sample-every must be >= 1, got ", options.every);
  ZT_CHECK(options.max_new_tokens >= 1, "--sample-max-new-tokens must be at least 1, got ", options.max_new_tokens);
}

std::vector<std::string> read_sample_prompts(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in, "--sample-prompts ", path, ": cannot open the file");
  std::vector<std::string> prompts;
  std::string line;
  int64_t number = 0;
  int json_lines = -1;  // unknown until the first non-blank line
  while (std::getline(in, line)) {
    ++number;
    if (blank(line)) continue;
    if (json_lines < 0) json_lines = line.find_first_not_of(" \t") != std::string::npos && line[line.find_first_not_of(" \t")] == '{';
    if (!line.empty() && line.back() == '\r') line.pop_back();
    prompts.push_back(json_lines ? prompt_of_json_line(line, path, number) : line);
    ZT_CHECK(!prompts.back().empty(), path, ":", number, ": the prompt is empty");
  }
  ZT_CHECK(!prompts.empty(), "--sample-prompts ", path, " holds no prompt (one per line, or JSON lines with \"prompt\")");
  return prompts;
}

TrainingSamples::TrainingSamples(const SampleOptions& options, const std::string& model_dir, const ModelConfig& config,
                                 const std::string& out_dir, bool leader)
    : options_(options), config_(config), samples_path_((std::filesystem::path(out_dir) / "samples.jsonl").string()),
      leader_(leader), prompts_(read_sample_prompts(options.prompts_file)) {
  ZT_CHECK(find_tokenizer_files(model_dir), "--sample-prompts needs the model's tokenizer, and ", model_dir,
           " holds none (tokenizer.model, tokenizer.json or vocab.json + merges.txt)");
  tokenizer_ = load_tokenizer(model_dir);
  for (const std::string& prompt : prompts_) {
    std::vector<int32_t> ids;
    if (tokenizer_->bos_id() >= 0) ids.push_back(static_cast<int32_t>(tokenizer_->bos_id()));
    const std::vector<int32_t> text = tokenizer_->encode(prompt);
    ids.insert(ids.end(), text.begin(), text.end());
    check_sequence_length(config, static_cast<int64_t>(ids.size()) + options.max_new_tokens,
                          cat("--sample-prompts: a prompt of ", ids.size(), " tokens + --sample-max-new-tokens ",
                              options.max_new_tokens));
    prompt_ids_.push_back(std::move(ids));
  }
  stop_ids_ = stop_token_ids(config, model_dir);
  if (stop_ids_.empty() && tokenizer_->eos_id() >= 0) stop_ids_ = {tokenizer_->eos_id()};
}

bool TrainingSamples::due(int64_t steps_done, int64_t total_steps) const {
  return steps_done == total_steps || (options_.every > 0 && steps_done % options_.every == 0);
}

void TrainingSamples::run(int64_t steps_done, CausalLM& model, Backend& backend, DType dtype, Communicator& comm,
                          const std::function<void(const std::string&)>& say) {
  GenerationOptions options;
  options.max_new_tokens = options_.max_new_tokens;
  options.stop_ids = stop_ids_;
  GenerationHooks hooks;
  const bool leader = leader_;
  // Rank 0's token on every rank, so that the ranks' forwards stay the same calls whatever
  // rounding says; a rank that chose another one is said (the run's ranks should agree exactly).
  int64_t disagreements = 0;
  hooks.agree = [&comm, leader, &disagreements](int32_t token) {
    const double highest = comm.all_reduce_max(static_cast<double>(token));
    const double lowest = -comm.all_reduce_max(-static_cast<double>(token));
    if (highest != lowest) ++disagreements;
    return static_cast<int32_t>(comm.all_reduce_max(leader ? static_cast<double>(token) : -1.0));
  };
  std::ofstream out;
  if (leader_) {
    out.open(samples_path_, std::ios::app);
    ZT_CHECK(out, samples_path_, ": cannot open for appending");
  }
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const Generation generation = generate(model, config_, backend, dtype, prompt_ids_[i], options, hooks);
    if (!leader_) continue;
    const std::string completion = decode_continuation(*tokenizer_, prompt_ids_[i], generation.tokens);
    const json record = {{"step", steps_done}, {"prompt", prompts_[i]}, {"completion", completion},
                         {"completion_ids", generation.tokens}, {"stop", generation.stopped ? "eos" : "length"}};
    out << utf8_dump(record) << "\n";
    say(cat("sample at step ", steps_done, " | ", utf8_dump(prompts_[i]), " -> ", utf8_dump(completion)));
  }
  if (disagreements > 0)
    say(cat("warning: samples at step ", steps_done, ": the ranks chose different tokens ", disagreements,
            " times (rank 0's were used)"));
  if (leader_) {
    out.flush();
    ZT_CHECK(out, samples_path_, ": write failed");
  }
}

}  // namespace zt
