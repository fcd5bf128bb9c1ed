// What `zerotune prep` makes of each row and how it writes a shard: the seam between the prep
// pipeline (data/prep.cpp: reading rows, staging shards, the summary) and the record kinds,
// samples (data/prep.cpp, the DeepSpeed-Chat step-1 layout) or preference pairs
// (data/prep_pairs.cpp, `--pairs`, the step-2 layout).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/prep.h"

namespace zt {

class PrepRecords {
 public:
  virtual ~PrepRecords() = default;
  // Why the row cannot become a record, as a short fixed reason (skip counts group by it), or "".
  virtual std::string bad_row_reason(const nlohmann::json& row) const = 0;
  // The options that choose the columns, for the message about a bad row.
  virtual std::string column_options() const = 0;
  // Turns a good row into a pending record: adds to summary's truncated/tokens/target_tokens and
  // pushes its length (tokens of the longest sequence it makes) onto `lengths`. Returns the skip
  // reason when the row makes no record (nothing is added then), else "".
  virtual std::string add_row(const nlohmann::json& row, SplitSummary& summary, std::vector<int64_t>& lengths) = 0;
  virtual int64_t pending() const = 0;  // records waiting for the next shard
  // Writes the pending records as one shard at `path` and clears them.
  virtual void write_shard(const std::string& path, const ShardAttributes& attributes) = 0;
};

// The records waiting for the next shard, and writing them as one: what every kind shares.
// `write` is the kind's shard writer (data/token_shards.h: write_token_shard, write_pair_shard).
template <class Record, void (*write)(const std::string&, std::span<const Record>, const ShardAttributes&)>
class QueuedRecords : public PrepRecords {
 public:
  int64_t pending() const final { return static_cast<int64_t>(pending_.size()); }

  void write_shard(const std::string& path, const ShardAttributes& attributes) final {
    write(path, pending_, attributes);
    pending_.clear();
  }

 protected:
  std::vector<Record> pending_;  // [<= shard_samples] records of the shard being filled
};

// The kinds whose records are samples (prompt/response, chat).
using QueuedSamples = QueuedRecords<TokenSample, write_token_shard>;

// The reason shared by both kinds (data/prep.cpp): a column of `columns` missing or not a string,
// or a column of `responses` (a subset) empty; "" when the row has them all.
std::string bad_columns_reason(const nlohmann::json& row, const std::vector<std::string>& columns,
                               const std::vector<std::string>& responses);

// Counts a sample into `summary` and `lengths` and queues it on `pending`; returns
// `no_target_reason` instead (nothing counted) when no token of it is a target.
std::string queue_sample(TokenSample sample, bool truncated, const std::string& no_target_reason, SplitSummary& summary,
                         std::vector<int64_t>& lengths, std::vector<TokenSample>& pending);

// --format chat (data/prep_chat.cpp): per row the conversation's tokens, assistant turns as targets.
std::unique_ptr<PrepRecords> make_chat_records(const Tokenizer& tokenizer, const PrepOptions& options);

// --pairs (data/prep_pairs.cpp): per row the prompt, chosen and rejected token ids.
std::unique_ptr<PrepRecords> make_pair_records(const Tokenizer& tokenizer, const PrepOptions& options);

}  // namespace zt
