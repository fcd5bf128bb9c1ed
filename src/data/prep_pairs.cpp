// Preference pairs for `zerotune prep --pairs` (layout in data/prep_pairs.h).
#include "data/prep_pairs.h"

#include <algorithm>

#include "core/error.h"
#include "data/prep_records.h"

namespace zt {

namespace {

// One side: the step-1 sample of prompt + response, split at the prompt's end. The response's
// tokens are scored, except an EOS id appended after them (it survived the cut).
TokenSample response_side(const Tokenizer& tokenizer, std::string_view prompt, std::string_view response,
                          int64_t max_seq_len, std::string_view eot_token, int64_t prompt_tokens, bool& truncated) {
  const TokenSample sample = build_prep_sample(tokenizer, prompt, response, max_seq_len, false, truncated, eot_token);
  const auto begin = static_cast<std::ptrdiff_t>(std::min<size_t>(static_cast<size_t>(prompt_tokens), sample.tokens.size()));
  TokenSample side{{sample.tokens.begin() + begin, sample.tokens.end()}, {}};  // [R]
  side.loss_mask.assign(side.tokens.size(), 1);
  const bool ends_with_eos = eot_token.empty() && tokenizer.eos_id() >= 0 && !truncated;
  if (ends_with_eos && !side.loss_mask.empty()) side.loss_mask.back() = 0;
  return side;
}

bool has_scored_token(const TokenSample& side) {
  return std::find(side.loss_mask.begin(), side.loss_mask.end(), uint8_t{1}) != side.loss_mask.end();
}

class PairRecords final : public QueuedRecords<TokenPair, write_pair_shard> {
 public:
  PairRecords(const Tokenizer& tokenizer, const PrepOptions& options) : tokenizer_(tokenizer), options_(options) {}

  std::string bad_row_reason(const nlohmann::json& row) const override {
    return bad_columns_reason(row, {options_.prompt_column, options_.response_column, options_.rejected_column},
                              {options_.response_column, options_.rejected_column});
  }

  std::string column_options() const override { return "--prompt-column/--response-column/--rejected-column"; }

  std::string add_row(const nlohmann::json& row, SplitSummary& summary, std::vector<int64_t>& lengths) override {
    bool truncated = false, kept = false;
    TokenPair pair = build_prep_pair(tokenizer_, row[options_.prompt_column].get_ref<const std::string&>(),
                                     row[options_.response_column].get_ref<const std::string&>(),
                                     row[options_.rejected_column].get_ref<const std::string&>(), options_.max_seq_len,
                                     options_.eot_token, truncated, kept);
    if (!kept) return cat("no response token within --max-seq-len ", options_.max_seq_len, " (prompt too long)");
    summary.truncated += truncated ? 1 : 0;
    for (const TokenSample* side : {&pair.chosen, &pair.rejected}) {
      summary.tokens += static_cast<int64_t>(pair.prompt.size() + side->tokens.size());
      for (uint8_t value : side->loss_mask) summary.target_tokens += value;
    }
    lengths.push_back(static_cast<int64_t>(pair.prompt.size() + std::max(pair.chosen.tokens.size(), pair.rejected.tokens.size())));
    pending_.push_back(std::move(pair));
    return "";
  }

 private:
  const Tokenizer& tokenizer_;
  const PrepOptions& options_;
};

}  // namespace

TokenPair build_prep_pair(const Tokenizer& tokenizer, std::string_view prompt, std::string_view chosen,
                          std::string_view rejected, int64_t max_seq_len, std::string_view eot_token, bool& truncated,
                          bool& kept) {
  // [BOS] + prompt ids, the prefix both sides share (before the cut).
  std::vector<int32_t> prompt_ids = tokenizer.encode(prompt);  // [P]
  if (tokenizer.bos_id() >= 0) prompt_ids.insert(prompt_ids.begin(), static_cast<int32_t>(tokenizer.bos_id()));
  if (static_cast<int64_t>(prompt_ids.size()) > max_seq_len) prompt_ids.resize(static_cast<size_t>(max_seq_len));
  const int64_t prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  bool chosen_cut = false, rejected_cut = false;
  TokenPair pair;
  pair.prompt = std::move(prompt_ids);
  pair.chosen = response_side(tokenizer, prompt, chosen, max_seq_len, eot_token, prompt_tokens, chosen_cut);
  pair.rejected = response_side(tokenizer, prompt, rejected, max_seq_len, eot_token, prompt_tokens, rejected_cut);
  truncated = chosen_cut || rejected_cut;
  kept = has_scored_token(pair.chosen) && has_scored_token(pair.rejected);
  return pair;
}

std::unique_ptr<PrepRecords> make_pair_records(const Tokenizer& tokenizer, const PrepOptions& options) {
  return std::make_unique<PairRecords>(tokenizer, options);
}

}  // namespace zt
