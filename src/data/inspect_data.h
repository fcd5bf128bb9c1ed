// `zerotune inspect` on a data directory: what the token shards of a split hold (shards, sizes,
// attributes, sample lengths, target fraction) and one sample decoded with its loss mask marked.
// The report is built as JSON (`--json` prints it) and formatted as text from that JSON, so both
// forms always show the same numbers.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

struct DataInspectOptions {
  std::string split;         // empty: the directory's only split
  int64_t sample_index = 0;  // the sample to show (--sample N)
  std::string tokenizer;     // model dir or .model file to decode with; empty: show token ids
  int histogram_bins = 10;
};

// Whether `dir` is a directory holding at least one token shard named <split>-NNNNN.h5.
bool holds_token_shards(const std::string& dir);

// The report of `dir` (see format_data_report for what it holds). Errors name the file or dir.
nlohmann::ordered_json inspect_data_dir(const std::string& dir, const DataInspectOptions& options);

// The report as text: shard table, totals, attributes, length percentiles and a histogram with
// text bars, and the sample with prompt tokens plain and target tokens inside [[ ]].
std::string format_data_report(const nlohmann::ordered_json& report);

}  // namespace zt
