// The preprocessing pipeline of `zerotune prep` (data/prep.h): rows are read file by file,
// turned into samples and written shard by shard into a temporary directory inside the output
// directory; only when every shard is complete are old shards of the split removed (--force)
// and the new ones renamed into place.
#include "data/prep.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <utility>

#include "core/error.h"
#include "data/jsonl_reader.h"
#include "data/row_split.h"
#include "data/prep_records.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

std::string shard_file_name(const std::string& split, int64_t index) {
  char number[32];
  std::snprintf(number, sizeof number, "%05lld", static_cast<long long>(index));
  return cat(split, "-", number, ".h5");
}

// The shards of `split` already in `dir` (sorted), e.g. train-00000.h5.
std::vector<fs::path> existing_shards(const fs::path& dir, const std::string& split) {
  std::vector<fs::path> shards;
  if (!fs::is_directory(dir)) return shards;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && entry.path().extension() == ".h5" && shard_split_from_file_name(name) == split)
      shards.push_back(entry.path());
  }
  std::sort(shards.begin(), shards.end());
  return shards;
}

std::string column_list(const nlohmann::json& row) {
  std::string names;
  for (const auto& item : row.items()) {
    if (!names.empty()) names += ", ";
    names += item.key();
  }
  return names.empty() ? "none" : names;
}

// Value at percentile `percent` of sorted `values` (nearest rank: the ceil(p/100 * n)-th).
int64_t percentile(const std::vector<int64_t>& sorted, int percent) {
  if (sorted.empty()) return 0;
  const size_t rank = (sorted.size() * static_cast<size_t>(percent) + 99) / 100;
  return sorted[std::max<size_t>(rank, 1) - 1];
}

// The staging directory inside the output directory. Unless commit() ran, the destructor
// removes the staging directory, and the output directory too when this run created it.
class ShardStaging {
 public:
  ShardStaging(const fs::path& out_dir, const std::string& split) : out_dir_(out_dir) {
    std::error_code error;
    created_out_dir_ = !fs::exists(out_dir_);
    fs::create_directories(out_dir_, error);
    ZT_CHECK(!error, out_dir_.string(), ": cannot create the output directory: ", error.message());
    std::string pattern = (out_dir_ / cat(".prep-", split, "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
      remove_created_out_dir();
      fail(out_dir_.string(), ": cannot create a temporary directory in it");
    }
    staging_dir_ = pattern;
  }
  ShardStaging(const ShardStaging&) = delete;
  ShardStaging& operator=(const ShardStaging&) = delete;
  ~ShardStaging() {
    if (committed_) return;
    std::error_code ignored;
    fs::remove_all(staging_dir_, ignored);
    remove_created_out_dir();
  }

  const fs::path& staging_dir() const { return staging_dir_; }

  // Removes `old_shards`, then moves every staged file into the output directory.
  std::vector<std::string> commit(const std::vector<fs::path>& old_shards, const std::vector<std::string>& staged_names) {
    std::error_code error;
    for (const fs::path& old_shard : old_shards) {
      fs::remove(old_shard, error);
      ZT_CHECK(!error, old_shard.string(), ": cannot remove the old shard (--force): ", error.message());
    }
    std::vector<std::string> final_paths;
    for (const std::string& name : staged_names) {
      const fs::path target = out_dir_ / name;
      fs::rename(staging_dir_ / name, target, error);
      ZT_CHECK(!error, target.string(), ": cannot move the new shard into place: ", error.message());
      final_paths.push_back(target.string());
    }
    committed_ = true;
    fs::remove_all(staging_dir_, error);
    return final_paths;
  }

 private:
  void remove_created_out_dir() {
    std::error_code ignored;
    if (created_out_dir_ && fs::is_empty(out_dir_, ignored)) fs::remove(out_dir_, ignored);
  }
  fs::path out_dir_;
  fs::path staging_dir_;
  bool created_out_dir_ = false;
  bool committed_ = false;
};

void check_split_name(const std::string& split, const char* flag) {
  const bool split_ok = !split.empty() && std::all_of(split.begin(), split.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
  });
  ZT_CHECK(split_ok && shard_split_from_file_name(shard_file_name(split, 0)) == split, flag, " '", split,
           "': use letters, digits, '_', '-', '.' (e.g. train, test)");
}

void check_data_split(const PrepOptions& options) {
  if (options.data_split.empty()) {
    ZT_CHECK(options.data_phase == 1, "--data-phase ", options.data_phase, ": applies with --data-split");
    return;
  }
  double total = 0.0;
  for (double weight : options.data_split) {
    ZT_CHECK(weight >= 0.0 && std::isfinite(weight), "--data-split: weight ", weight, " must be a number >= 0");
    total += weight;
  }
  ZT_CHECK(total > 0.0, "--data-split: the weights add up to 0");
  ZT_CHECK(options.data_phase >= 1 && options.data_phase <= static_cast<int>(options.data_split.size()), "--data-phase ",
           options.data_phase, ": must name one of the ", options.data_split.size(), " portions of --data-split (1..",
           options.data_split.size(), ")");
}

// The step-1 samples (build_prep_sample), one per row.
class SampleRecords final : public QueuedSamples {
 public:
  SampleRecords(const Tokenizer& tokenizer, const PrepOptions& options) : tokenizer_(tokenizer), options_(options) {}

  std::string bad_row_reason(const nlohmann::json& row) const override {
    return bad_columns_reason(row, {options_.prompt_column, options_.response_column}, {options_.response_column});
  }

  std::string column_options() const override {
    return "--prompt-column/--response-column (rows of chat 'messages': --format chat)";
  }

  std::string add_row(const nlohmann::json& row, SplitSummary& summary, std::vector<int64_t>& lengths) override {
    bool truncated = false;
    TokenSample sample = build_prep_sample(tokenizer_, row[options_.prompt_column].get_ref<const std::string&>(),
                                           row[options_.response_column].get_ref<const std::string&>(),
                                           options_.max_seq_len, options_.loss_on_all, truncated, options_.eot_token);
    // The prompt fills max_seq_len: nothing to learn from this row.
    return queue_sample(std::move(sample), truncated, cat("no target token within --max-seq-len ", options_.max_seq_len, " (prompt too long)"),
                        summary, lengths, pending_);
  }

 private:
  const Tokenizer& tokenizer_;
  const PrepOptions& options_;
};

}  // namespace

std::string queue_sample(TokenSample sample, bool truncated, const std::string& no_target_reason, SplitSummary& summary,
                         std::vector<int64_t>& lengths, std::vector<TokenSample>& pending) {
  int64_t targets = 0;
  for (uint8_t target : sample.loss_mask) targets += target;
  if (targets == 0) return no_target_reason;
  summary.truncated += truncated ? 1 : 0;
  summary.tokens += static_cast<int64_t>(sample.tokens.size());
  summary.target_tokens += targets;
  lengths.push_back(static_cast<int64_t>(sample.tokens.size()));
  pending.push_back(std::move(sample));
  return "";
}

std::string bad_columns_reason(const nlohmann::json& row, const std::vector<std::string>& columns,
                               const std::vector<std::string>& responses) {
  for (const std::string& column : columns) {
    const auto found = row.find(column);
    if (found == row.end()) return cat("missing column '", column, "'");
    if (!found->is_string()) return cat("column '", column, "' is not a string");
  }
  for (const std::string& column : responses)
    if (row[column].get_ref<const std::string&>().empty()) return cat("empty response (column '", column, "')");
  return "";
}

namespace {

void check_options(const PrepOptions& options) {
  ZT_CHECK(!options.inputs.empty(), "--input: at least one input file is needed");
  ZT_CHECK(!options.out_dir.empty(), "--out: an output directory is needed");
  ZT_CHECK(options.max_seq_len >= 2, "--max-seq-len ", options.max_seq_len, ": must be at least 2 (BOS and one token)");
  ZT_CHECK(options.shard_samples >= 1, "--shard-samples ", options.shard_samples, ": must be at least 1");
  ZT_CHECK(!options.prompt_column.empty() && !options.response_column.empty(), "--prompt-column/--response-column: must not be empty");
  ZT_CHECK(!options.pairs || (!options.rejected_column.empty() && options.rejected_column != options.response_column),
           "--rejected-column '", options.rejected_column, "': must name a column other than --response-column");
  ZT_CHECK(!options.pairs || !options.loss_on_all, "--loss-on all: pairs (--pairs) have no loss mask to choose; leave it out");
  ZT_CHECK(!options.chat || !options.pairs, "--format chat and --pairs: pairs are prompt/chosen/rejected rows, not chat messages");
  ZT_CHECK(!options.chat || options.eot_token.empty(),
           "--eot-token: chat data (--format chat) ends each turn as its chat template says; leave it out");
  ZT_CHECK(options.chat || options.chat_template.empty(), "--chat-template: only with --format chat");
  check_split_name(options.split, "--split");
  for (const std::string& input : options.inputs)
    ZT_CHECK(fs::is_regular_file(input), "--input ", input, ": no such file");
  // The evaluation split: from its own rows or held out of --input, not both.
  ZT_CHECK(options.eval_fraction >= 0.0 && options.eval_fraction < 1.0, "--eval-fraction ", options.eval_fraction,
           ": must be at least 0 and below 1 (0.1 holds out 10% of the rows, as DeepSpeed-Chat's \"9,1\")");
  ZT_CHECK(options.eval_inputs.empty() || options.eval_fraction == 0.0,
           "--eval-input and --eval-fraction: give one (the dataset's own evaluation rows, or a share of --input held out)");
  check_data_split(options);
  if (!options.writes_eval()) return;
  check_split_name(options.eval_split, "--eval-split");
  ZT_CHECK(options.eval_split != options.split, "--eval-split '", options.eval_split,
           "': must differ from --split (the training split's shards)");
  for (const std::string& input : options.eval_inputs)
    ZT_CHECK(fs::is_regular_file(input), "--eval-input ", input, ": no such file");
}

// The shards of `split` in `out_dir` this run replaces: none, or with --force all of them.
std::vector<fs::path> replaced_shards(const fs::path& out_dir, const std::string& split, const PrepOptions& options) {
  std::vector<fs::path> old_shards = existing_shards(out_dir, split);
  ZT_CHECK(old_shards.empty() || options.force, "--out ", options.out_dir, ": already holds ", old_shards.size(),
           " shard(s) of split '", split, "' (", old_shards.empty() ? "" : old_shards.front().filename().string(),
           "); use --force to replace them or another --out/--split");
  return old_shards;
}

ShardAttributes shard_attributes(const Tokenizer& tokenizer, const PrepOptions& options, const std::string& split,
                                 const std::vector<std::string>& inputs) {
  ShardAttributes attributes;
  attributes.vocab_size = tokenizer.vocab_size();
  attributes.bos_id = tokenizer.bos_id();
  attributes.eos_id = tokenizer.eos_id();
  attributes.pad_id = tokenizer.pad_id();
  attributes.tokenizer_sha256 = tokenizer.file_sha256();
  attributes.max_seq_len = options.max_seq_len;
  attributes.split = split;
  for (const std::string& input : inputs) {  // file names only: the bytes must not depend on the cwd
    if (!attributes.source.empty()) attributes.source += ",";
    attributes.source += fs::path(input).filename().string();
  }
  return attributes;
}

int64_t count_rows(const std::vector<std::string>& files) {
  int64_t rows = 0;
  for (const std::string& file : files) {
    JsonRowReader reader(file);
    JsonRow row;
    while (reader.next(row)) ++rows;
  }
  return rows;
}

// The role of each row of `files` under --data-split and a hold-out of `held_out_fraction`
// (counted first: the permutations need the number of rows); empty when every row is kept.
std::vector<RowRole> row_roles(const std::vector<std::string>& files, double held_out_fraction, const PrepOptions& options) {
  if (files.empty() || (held_out_fraction == 0.0 && options.data_split.empty())) return {};
  return deepspeed_chat_row_roles(count_rows(files), held_out_fraction, options.data_split,
                                  static_cast<size_t>(options.data_phase - 1), options.seed);
}

// Hands every row of `files`, in order, to `take` with its number (counted across the files)
// and its file; with `progress`, a line on stderr about once a second.
void read_rows(const std::vector<std::string>& files, bool progress,
               const std::function<void(int64_t, const std::string&, const JsonRow&)>& take) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_progress = Clock::now();
  int64_t row_number = 0;
  for (size_t file_index = 0; file_index < files.size(); ++file_index) {
    JsonRowReader reader(files[file_index]);
    JsonRow row;
    while (reader.next(row)) {
      take(row_number++, reader.path(), row);
      if (progress && Clock::now() - last_progress >= std::chrono::seconds(1)) {
        last_progress = Clock::now();
        std::fprintf(stderr, "\rprep: file %zu/%zu, %3.0f%% read, %lld rows   ", file_index + 1, files.size(),
                     100.0 * static_cast<double>(reader.bytes_done()) / static_cast<double>(std::max<int64_t>(reader.bytes_total(), 1)),
                     static_cast<long long>(row_number));
        std::fflush(stderr);
      }
    }
  }
  if (progress) std::fprintf(stderr, "\r%80s\r", "");
}

// One split's records (samples, or pairs with --pairs): built row by row, written shard by shard
// into the staging directory.
class SplitWriter {
 public:
  SplitWriter(const PrepOptions& options, const Tokenizer& tokenizer, ShardAttributes attributes, fs::path staging_dir)
      : options_(options), attributes_(std::move(attributes)), staging_dir_(std::move(staging_dir)),
        records_(options.pairs  ? make_pair_records(tokenizer, options)
                 : options.chat ? make_chat_records(tokenizer, options)
                                : std::make_unique<SampleRecords>(tokenizer, options)) {
    summary_.split = attributes_.split;
  }

  // A row of `path` becomes a record, or is counted as skipped (--skip-bad-rows), or stops the run.
  void add(const std::string& path, const JsonRow& row) {
    ++summary_.rows_read;
    const std::string reason = records_->bad_row_reason(row.object);
    if (!reason.empty()) {
      ZT_CHECK(options_.skip_bad_rows, path, ":", row.line, ": ", reason, " (the row has columns: ",
               column_list(row.object), "); choose columns with ", records_->column_options(), ", or count such rows "
               "as skipped with --skip-bad-rows");
      ++summary_.skipped[reason];
      return;
    }
    std::string skip;
    try {
      skip = records_->add_row(row.object, summary_, lengths_);
    } catch (const Error& error) {  // a row the records refuse (chat: the template raised): name it
      fail(path, ":", row.line, ": ", error.what());
    }
    if (!skip.empty()) {
      ++summary_.skipped[skip];
      return;
    }
    if (records_->pending() == options_.shard_samples) flush_shard();
  }

  // Writes the last shard; the figures, with the staged file names as shard_paths.
  SplitSummary finish() {
    flush_shard();
    ZT_CHECK(!summary_.shard_paths.empty(), "no samples to write for split '", attributes_.split, "': ",
             summary_.rows_read, " rows read from ", attributes_.source.empty() ? "the inputs" : attributes_.source,
             summary_.rows_read == 0 ? "" : ", all of them skipped");
    summary_.samples_written = static_cast<int64_t>(lengths_.size());
    std::sort(lengths_.begin(), lengths_.end());
    summary_.length_p50 = percentile(lengths_, 50);
    summary_.length_p90 = percentile(lengths_, 90);
    summary_.length_p99 = percentile(lengths_, 99);
    summary_.length_max = lengths_.back();
    return summary_;
  }

  const std::vector<std::string>& staged_names() const { return summary_.shard_paths; }

 private:
  void flush_shard() {
    if (records_->pending() == 0) return;
    const std::string name = shard_file_name(attributes_.split, static_cast<int64_t>(summary_.shard_paths.size()));
    records_->write_shard((staging_dir_ / name).string(), attributes_);
    summary_.shard_paths.push_back(name);
  }

  const PrepOptions& options_;
  const ShardAttributes attributes_;
  const fs::path staging_dir_;
  const std::unique_ptr<PrepRecords> records_;
  SplitSummary summary_;
  std::vector<int64_t> lengths_;  // [records] tokens per sample (per pair: its longer side)
};

}  // namespace

TokenSample build_prep_sample(const Tokenizer& tokenizer, std::string_view prompt, std::string_view response,
                              int64_t max_seq_len, bool loss_on_all, bool& truncated, std::string_view eot_token) {
  const std::vector<int32_t> prompt_ids = tokenizer.encode(prompt);  // [P]
  // The end-of-conversation text is encoded together with the response, as DeepSpeed-Chat
  // tokenizes prompt + chosen + eot in one piece: "end.<|endoftext|>" may merge across the join.
  const bool eos_at_end = eot_token.empty();
  const std::vector<int32_t> response_ids =  // [R]
      eos_at_end ? tokenizer.encode_continuation(response) : tokenizer.encode_continuation(cat(response, eot_token));
  TokenSample sample;
  auto append = [&](int32_t id, uint8_t target) {
    sample.tokens.push_back(id);
    sample.loss_mask.push_back(target);
  };
  const uint8_t prompt_target = loss_on_all ? 1 : 0;
  if (tokenizer.bos_id() >= 0) append(static_cast<int32_t>(tokenizer.bos_id()), 0);
  for (int32_t id : prompt_ids) append(id, prompt_target);
  for (int32_t id : response_ids) append(id, 1);
  if (eos_at_end && tokenizer.eos_id() >= 0) append(static_cast<int32_t>(tokenizer.eos_id()), 1);
  // The first token is never a target: nothing before it predicts it (matters without a BOS).
  if (!sample.loss_mask.empty()) sample.loss_mask[0] = 0;
  truncated = static_cast<int64_t>(sample.tokens.size()) > max_seq_len;
  if (truncated) {  // keep the beginning, as DeepSpeed-Chat's tokenizer(truncation=True) does
    sample.tokens.resize(static_cast<size_t>(max_seq_len));
    sample.loss_mask.resize(static_cast<size_t>(max_seq_len));
  }
  return sample;
}

PrepSummary run_prep(const PrepOptions& options) {
  check_options(options);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(options.tokenizer);

  const fs::path out_dir(options.out_dir);
  ZT_CHECK(!fs::exists(out_dir) || fs::is_directory(out_dir), "--out ", options.out_dir, ": exists and is not a directory");
  std::vector<fs::path> old_shards = replaced_shards(out_dir, options.split, options);
  if (options.writes_eval()) {
    const std::vector<fs::path> old_eval = replaced_shards(out_dir, options.eval_split, options);
    old_shards.insert(old_shards.end(), old_eval.begin(), old_eval.end());
  }
  // --eval-fraction, --data-split: the role of each row (empty: every row kept).
  const std::vector<RowRole> input_roles = row_roles(options.inputs, options.eval_fraction, options);  // [rows of --input]
  const std::vector<RowRole> eval_input_roles = row_roles(options.eval_inputs, 0.0, options);     // [rows of --eval-input]

  ShardStaging staging(out_dir, options.split);
  SplitWriter train(options, *tokenizer, shard_attributes(*tokenizer, options, options.split, options.inputs),
                    staging.staging_dir());
  std::optional<SplitWriter> eval;
  if (options.writes_eval())
    eval.emplace(options, *tokenizer,
                 shard_attributes(*tokenizer, options, options.eval_split,
                                  options.eval_inputs.empty() ? options.inputs : options.eval_inputs),
                 staging.staging_dir());
  int64_t unused_rows = 0;  // rows of other --data-split portions
  read_rows(options.inputs, options.progress, [&](int64_t row_number, const std::string& path, const JsonRow& row) {
    const RowRole role = input_roles.empty() ? RowRole::Kept : input_roles[static_cast<size_t>(row_number)];
    if (role == RowRole::Unused) ++unused_rows;
    else (role == RowRole::HeldOut ? *eval : train).add(path, row);
  });
  read_rows(options.eval_inputs, options.progress, [&](int64_t row_number, const std::string& path, const JsonRow& row) {
    if (eval_input_roles.empty() || eval_input_roles[static_cast<size_t>(row_number)] == RowRole::Kept) eval->add(path, row);
    else ++unused_rows;
  });

  PrepSummary summary;
  static_cast<SplitSummary&>(summary) = train.finish();
  summary.other_phase_rows = unused_rows;
  std::vector<std::string> staged = train.staged_names();
  if (eval) {
    summary.eval = eval->finish();
    staged.insert(staged.end(), eval->staged_names().begin(), eval->staged_names().end());
  }
  const std::vector<std::string> final_paths = staging.commit(old_shards, staged);
  summary.shard_paths.assign(final_paths.begin(), final_paths.begin() + static_cast<std::ptrdiff_t>(summary.shard_paths.size()));
  if (summary.eval)
    summary.eval->shard_paths.assign(final_paths.begin() + static_cast<std::ptrdiff_t>(summary.shard_paths.size()), final_paths.end());
  return summary;
}

namespace {

std::string format_split_summary(const SplitSummary& summary, const PrepOptions& options) {
  std::string text = cat("zerotune prep: split '", summary.split, "' written to ", options.out_dir, " (",
                         summary.shard_paths.size(), " shard", summary.shard_paths.size() == 1 ? "" : "s", ")\n");
  text += cat("  rows read         ", summary.rows_read, "\n");
  text += cat(options.pairs ? "  pairs written     " : "  samples written   ", summary.samples_written, "\n");
  text += cat("  truncated         ", summary.truncated, " (cut to --max-seq-len ", options.max_seq_len, ")\n");
  int64_t skipped = 0;
  for (const auto& [reason, count] : summary.skipped) skipped += count;
  text += cat("  skipped           ", skipped, "\n");
  for (const auto& [reason, count] : summary.skipped) text += cat("    ", count, "  ", reason, "\n");
  const double target_percent = summary.tokens > 0 ? 100.0 * static_cast<double>(summary.target_tokens) / static_cast<double>(summary.tokens) : 0.0;
  char percent_text[32];
  std::snprintf(percent_text, sizeof percent_text, "%.1f", target_percent);
  text += cat("  tokens            ", summary.tokens, " (targets ", summary.target_tokens, ", ", percent_text, "%)\n");
  text += cat("  sample length     p50 ", summary.length_p50, ", p90 ", summary.length_p90, ", p99 ", summary.length_p99,
              ", max ", summary.length_max, "\n");
  return text;
}

}  // namespace

std::string format_prep_summary(const PrepSummary& summary, const PrepOptions& options) {
  std::string text = format_split_summary(summary, options);
  if (!options.data_split.empty()) {
    std::string weights;
    for (double weight : options.data_split) weights += cat(weights.empty() ? "" : ",", weight);
    text += cat("  (--data-split ", weights, ", phase ", options.data_phase, ": this phase's portion of each split's rows, ",
                "seed ", options.seed, ", as DeepSpeed-Chat's --data_split)\n");
  }
  if (!summary.eval) {
    if (summary.other_phase_rows > 0)
      text += cat("  rows of other --data-split portions: ", summary.other_phase_rows, " (not written)\n");
    return text;
  }
  text += format_split_summary(*summary.eval, options);
  if (options.eval_fraction > 0.0)
    text += cat("  (held out of the --input rows: the last ", options.eval_fraction,
                " of their permutation by numpy.random.RandomState(", options.seed, "), as DeepSpeed-Chat's train_eval split)\n");
  if (summary.other_phase_rows > 0)
    text += cat("  rows of other --data-split portions: ", summary.other_phase_rows, " (not written)\n");
  text += cat("train on it with: zerotune train --data ", options.out_dir, " --split ", summary.split, " --eval-split ",
              summary.eval->split, " ...\n");
  return text;
}

}  // namespace zt
