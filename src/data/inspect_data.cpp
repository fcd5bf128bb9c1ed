// The data-directory report of `zerotune inspect` (see inspect_data.h): numbers from the shard
// offsets (no token reads) and one streaming pass over the loss masks; one sample read in full.
#include "data/inspect_data.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "data/data_model_check.h"
#include "data/length_grouping.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// Equal-width bins over [shortest, longest]: [{"from", "to" (exclusive), "count"}].
Json length_histogram(const std::vector<int64_t>& sorted_lengths, int bins) {
  const int64_t shortest = sorted_lengths.front(), longest = sorted_lengths.back();
  const int64_t span = longest - shortest + 1;
  const int64_t width = (span + bins - 1) / bins;  // >= 1
  Json histogram = Json::array();
  auto next = sorted_lengths.begin();
  for (int64_t from = shortest; from <= longest; from += width) {
    const auto end = std::lower_bound(next, sorted_lengths.end(), from + width);
    histogram.push_back({{"from", from}, {"to", from + width}, {"count", end - next}});
    next = end;
  }
  return histogram;
}

// Runs of equal loss-mask value: [{"target": bool, "ids": [...]}] in sample order.
Json mask_segments(const TokenSample& sample) {
  Json segments = Json::array();
  for (size_t begin = 0; begin < sample.tokens.size();) {
    size_t end = begin;
    while (end < sample.tokens.size() && sample.loss_mask[end] == sample.loss_mask[begin]) ++end;
    segments.push_back({{"target", sample.loss_mask[begin] == 1},
                        {"ids", std::vector<int32_t>(sample.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                                     sample.tokens.begin() + static_cast<std::ptrdiff_t>(end))}});
    begin = end;
  }
  return segments;
}

// The sample as one string: each segment as text (with a tokenizer) or as its ids, target
// segments inside [[ ]].
std::string marked_sample(const Json& segments, const Tokenizer* tokenizer) {
  std::string marked;
  for (const Json& segment : segments) {
    const std::vector<int32_t> ids = segment["ids"].get<std::vector<int32_t>>();
    std::string body;
    if (tokenizer) {
      body = tokenizer->pieces_text(ids);
    } else {
      for (int32_t id : ids) {
        if (!body.empty()) body += ' ';
        body += std::to_string(id);
      }
    }
    const bool target = segment["target"].get<bool>();
    if (!marked.empty() && !tokenizer) marked += ' ';
    marked += target ? (tokenizer ? "[[" + body + "]]" : "[[ " + body + " ]]") : body;
  }
  return marked;
}

// One sample (or one side of a pair) for the report.
Json sample_json(const TokenSample& sample, int64_t index, const Tokenizer* tokenizer) {
  int64_t sample_targets = 0;
  for (size_t t = 1; t < sample.loss_mask.size(); ++t) sample_targets += sample.loss_mask[t];
  return {{"index", index},
          {"length", sample.tokens.size()},
          {"target_tokens", sample_targets},
          {"decoded_with", tokenizer ? Json(tokenizer->file_path()) : Json(nullptr)},
          {"token_ids", sample.tokens},
          {"loss_mask", sample.loss_mask},
          {"marked", marked_sample(mask_segments(sample), tokenizer)}};
}

}  // namespace

bool holds_token_shards(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) return false;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error) || name.size() <= 3 || name.compare(name.size() - 3, 3, ".h5") != 0) continue;
    // "<split>-NNNNN.h5": only then is the split name shorter than the file's stem.
    if (shard_split_from_file_name(name).size() < name.size() - 3) return true;
  }
  return false;
}

Json inspect_data_dir(const std::string& dir, const DataInspectOptions& options) {
  ZT_CHECK(options.histogram_bins >= 1, "inspect: histogram bins must be at least 1, not ", options.histogram_bins);
  const TokenDataset dataset = TokenDataset::open(dir, options.split);
  const ShardAttributes& attrs = dataset.attributes();
  const int64_t samples = dataset.num_samples();

  Json report;
  report["kind"] = "data";
  report["path"] = dir;
  report["split"] = attrs.split;

  Json shards = Json::array();
  int64_t total_tokens = 0, total_bytes = 0;
  for (const ShardInfo& shard : dataset.shard_infos()) {
    std::error_code error;
    const auto bytes = fs::file_size(shard.path, error);
    ZT_CHECK(!error, shard.path, ": cannot read the file size: ", error.message());
    shards.push_back({{"name", fs::path(shard.path).filename().string()},
                      {"samples", shard.num_samples},
                      {"tokens", shard.num_tokens},
                      {"bytes", static_cast<int64_t>(bytes)}});
    total_tokens += shard.num_tokens;
    total_bytes += static_cast<int64_t>(bytes);
  }
  report["shards"] = shards;

  const int64_t targets = dataset.total_target_tokens();
  report["totals"] = {{"shards", shards.size()},
                      {"samples", samples},
                      {"tokens", total_tokens},
                      {"target_tokens", targets},
                      {"target_fraction", total_tokens > 0 ? static_cast<double>(targets) / static_cast<double>(total_tokens) : 0.0},
                      {"bytes", total_bytes}};

  // format and version are what TokenDataset::open accepted (it refuses any other).
  report["attributes"] = {{"format", kTokenShardFormat},
                          {"version", dataset.holds_pairs() ? kPairShardVersion : kTokenShardVersion},
                          {"record", dataset.holds_pairs() ? "pair" : "sample"},
                          {"vocab_size", attrs.vocab_size},
                          {"bos_id", attrs.bos_id},
                          {"eos_id", attrs.eos_id},
                          {"pad_id", attrs.pad_id},
                          {"tokenizer_sha256", attrs.tokenizer_sha256},
                          {"max_seq_len", attrs.max_seq_len},
                          {"split", attrs.split},
                          {"source", attrs.source}};

  std::vector<int64_t> lengths(static_cast<size_t>(samples));  // [N] tokens per sample, sorted below
  for (int64_t i = 0; i < samples; ++i) lengths[static_cast<size_t>(i)] = dataset.sample_length(i);
  std::sort(lengths.begin(), lengths.end());
  const int64_t at_max = static_cast<int64_t>(lengths.end() - std::lower_bound(lengths.begin(), lengths.end(), attrs.max_seq_len));
  report["lengths"] = {{"min", lengths.front()},
                       {"mean", static_cast<double>(total_tokens) / static_cast<double>(samples)},
                       {"p50", nearest_rank_percentile(lengths, 50)},
                       {"p90", nearest_rank_percentile(lengths, 90)},
                       {"p99", nearest_rank_percentile(lengths, 99)},
                       {"max", lengths.back()},
                       {"at_max_seq_len", at_max},
                       {"histogram", length_histogram(lengths, options.histogram_bins)}};

  const int64_t index = options.sample_index;
  ZT_CHECK(index >= 0 && index < samples, dir, ": --sample ", index, " is outside [0, ", samples, ") (split '",
           attrs.split, "' holds ", samples, " samples)");
  std::unique_ptr<Tokenizer> tokenizer;
  if (!options.tokenizer.empty()) {
    tokenizer = load_tokenizer(options.tokenizer);
    check_tokenizer_matches_data(attrs, dir, tokenizer->file_path(), tokenizer->file_sha256());
  }
  // A pair (prep --pairs): "sample" is its chosen side, "rejected" its rejected side.
  const bool pairs = dataset.holds_pairs();
  const TokenPair pair = pairs ? dataset.read_pair(index) : TokenPair{};
  report["sample"] = sample_json(pairs ? pair.chosen_sequence() : dataset.read_sample(index), index, tokenizer.get());
  if (pairs) report["rejected"] = sample_json(pair.rejected_sequence(), index, tokenizer.get());
  return report;
}

std::string format_data_report(const Json& report) {
  const Json& totals = report["totals"];
  const Json& attrs = report["attributes"];
  const Json& lengths = report["lengths"];
  const Json& sample = report["sample"];
  std::string text = cat("zerotune inspect: data directory ", report["path"].get<std::string>(), ", split '",
                         report["split"].get<std::string>(), "'\n\n");

  char line[256];
  text += cat("shards (", totals["shards"].get<int64_t>(), ")\n");
  std::snprintf(line, sizeof line, "  %-24s %10s %12s %12s\n", "name", "samples", "tokens", "bytes");
  text += line;
  auto shard_row = [&](const std::string& name, const Json& row) {
    std::snprintf(line, sizeof line, "  %-24s %10lld %12lld %12lld\n", name.c_str(),
                  static_cast<long long>(row["samples"].get<int64_t>()), static_cast<long long>(row["tokens"].get<int64_t>()),
                  static_cast<long long>(row["bytes"].get<int64_t>()));
    text += line;
  };
  for (const Json& shard : report["shards"]) shard_row(shard["name"].get<std::string>(), shard);
  shard_row("total", totals);
  text += cat("  target tokens ", totals["target_tokens"].get<int64_t>(), " (",
              fixed(100.0 * totals["target_fraction"].get<double>(), 1), "% of the tokens)\n\n");

  text += "attributes\n";
  for (const auto& [key, value] : attrs.items())
    text += cat("  ", key, std::string(18 - std::min<size_t>(key.size(), 17), ' '),
                value.is_string() ? value.get<std::string>() : value.dump(), "\n");

  text += cat("\nsample lengths (tokens): min ", lengths["min"].get<int64_t>(), ", mean ",
              fixed(lengths["mean"].get<double>(), 1), ", p50 ", lengths["p50"].get<int64_t>(), ", p90 ",
              lengths["p90"].get<int64_t>(), ", p99 ", lengths["p99"].get<int64_t>(), ", max ",
              lengths["max"].get<int64_t>(), "; ", lengths["at_max_seq_len"].get<int64_t>(),
              " at max_seq_len (truncated or exactly that long)\n");
  int64_t most = 1;
  for (const Json& bin : lengths["histogram"]) most = std::max(most, bin["count"].get<int64_t>());
  constexpr int64_t kBarWidth = 40;
  for (const Json& bin : lengths["histogram"]) {
    const int64_t count = bin["count"].get<int64_t>();
    const int64_t bar = (count * kBarWidth + most - 1) / most;  // a non-empty bin shows at least one '#'
    std::snprintf(line, sizeof line, "  [%6lld, %6lld)  %-*s %lld\n", static_cast<long long>(bin["from"].get<int64_t>()),
                  static_cast<long long>(bin["to"].get<int64_t>()), static_cast<int>(kBarWidth),
                  std::string(static_cast<size_t>(bar), '#').c_str(), static_cast<long long>(count));
    text += line;
  }

  const bool pair = report.contains("rejected");  // a pair: its chosen side, then its rejected side
  for (const Json* side : {&sample, pair ? &report["rejected"] : nullptr}) {
    if (!side) continue;
    const bool decoded = !(*side)["decoded_with"].is_null();
    const std::string title = pair ? cat("pair ", (*side)["index"].get<int64_t>(), ", ", side == &sample ? "chosen" : "rejected")
                                   : cat("sample ", (*side)["index"].get<int64_t>());
    text += cat("\n", title, ": ", (*side)["length"].get<int64_t>(), " tokens, ", (*side)["target_tokens"].get<int64_t>(),
                pair ? " scored; scored tokens inside [[ ]]" : " targets; target tokens inside [[ ]]",
                decoded ? cat(", decoded with ", (*side)["decoded_with"].get<std::string>())
                        : std::string(", as token ids (--tokenizer DIR decodes them)"),
                "\n", (*side)["marked"].get<std::string>(), "\n");
  }
  return text;
}

}  // namespace zt
