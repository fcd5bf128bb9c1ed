// Units over stages (stage_partition.h): the weights, then the smallest bottleneck by dynamic
// programming over prefix sums (a model has at most a few hundred units), then the split that
// reaches it with every stage as full as the later ones allow.
#include "pipe/stage_partition.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "data/pcre2_regex.h"

namespace zt {

namespace {

const char* unit_type(int unit, int units) {
  if (unit == 0) return "Embedding";
  return unit + 1 == units ? "Head" : "DecoderLayer";
}

// The fewest parts that hold weights [begin, end) with none above `bottleneck` (each part at
// least one unit); a weight above it makes it impossible (a count larger than any).
int parts_needed(const std::vector<int64_t>& weights, size_t begin, int64_t bottleneck) {
  int parts = 0;
  int64_t current = 0;
  for (size_t unit = begin; unit < weights.size(); ++unit) {
    if (weights[unit] > bottleneck) return std::numeric_limits<int>::max();
    if (parts == 0 || current + weights[unit] > bottleneck) {
      ++parts;
      current = 0;
    }
    current += weights[unit];
  }
  return parts;
}

// The smallest possible weight of the heaviest of `stages` contiguous non-empty parts.
int64_t smallest_bottleneck(const std::vector<int64_t>& weights, int stages) {
  const size_t units = weights.size();
  std::vector<int64_t> prefix(units + 1, 0);
  for (size_t unit = 0; unit < units; ++unit) prefix[unit + 1] = prefix[unit] + weights[unit];
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  // best[i]: the bottleneck of the first i units in the parts so far (kNone: impossible).
  std::vector<int64_t> best(units + 1, kNone);
  for (size_t i = 1; i <= units; ++i) best[i] = prefix[i];
  for (int part = 2; part <= stages; ++part) {
    std::vector<int64_t> next(units + 1, kNone);
    for (size_t i = static_cast<size_t>(part); i <= units; ++i)
      for (size_t j = static_cast<size_t>(part - 1); j < i; ++j)
        if (best[j] != kNone) next[i] = std::min(next[i], std::max(best[j], prefix[i] - prefix[j]));
    best = std::move(next);
  }
  return best[units];
}

}  // namespace

PartitionRule parse_partition_method(const std::string& text, const std::string& where) {
  if (text == "parameters") return {PartitionMethod::Parameters, ""};
  if (text == "uniform") return {PartitionMethod::Uniform, ""};
  if (text.rfind("type:", 0) == 0) {
    const std::string regex = text.substr(5);
    ZT_CHECK(!regex.empty(), where, ": partition_method 'type:' needs a pattern after the colon (e.g. type:decoder)");
    Pcre2Regex check("(?i)" + regex, Pcre2Regex::Syntax::kRegex, cat(where, ": partition_method '", text, "'"));
    return {PartitionMethod::Type, regex};
  }
  fail(where, ": unknown partition_method '", text, "' (parameters, uniform or type:REGEX, as DeepSpeed's)");
}

std::vector<UnitSummary> summarize_units(const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable) {
  ZT_CHECK(specs.size() == trainable.size(), "summarize_units: ", specs.size(), " specs, ", trainable.size(),
           " trainable flags");
  int units = 0;
  for (const ParamSpec& spec : specs) units = std::max(units, spec.unit + 1);
  // A tied spec counts as the parameter it is (its own trainable flag follows that one's).
  auto trainable_of = [&](const ParamSpec& spec) {
    if (!spec.tied()) return trainable[static_cast<size_t>(&spec - specs.data())];
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == spec.tied_to) return static_cast<bool>(trainable[i]);
    fail("summarize_units: ", spec.name, " is tied to ", spec.tied_to, ", which is not in the parameter list");
  };
  std::vector<UnitSummary> summaries(static_cast<size_t>(units));
  for (int unit = 0; unit < units; ++unit) summaries[static_cast<size_t>(unit)].type = unit_type(unit, units);
  for (const ParamSpec& spec : specs) {
    UnitSummary& summary = summaries[static_cast<size_t>(spec.unit)];
    summary.parameters += spec.numel();
    if (trainable_of(spec)) summary.trainable_parameters += spec.numel();
  }
  return summaries;
}

std::vector<int64_t> unit_weights(const std::vector<UnitSummary>& units, const PartitionRule& rule) {
  std::vector<int64_t> weights;
  if (rule.method == PartitionMethod::Type) {
    const Pcre2Regex pattern("(?i)" + rule.type_regex, Pcre2Regex::Syntax::kRegex, "partition_method type:");
    for (const UnitSummary& unit : units) weights.push_back(pattern.find_all(unit.type).empty() ? 0 : 1);
    ZT_CHECK(std::count(weights.begin(), weights.end(), 1) > 0, "partition_method 'type:", rule.type_regex,
             "' matches no unit (their types: Embedding, DecoderLayer, Head)");
    return weights;
  }
  for (const UnitSummary& unit : units)
    weights.push_back(rule.method == PartitionMethod::Uniform ? 1 : unit.trainable_parameters);
  return weights;
}

std::vector<int> partition_units(const std::vector<int64_t>& weights, int stages) {
  const int units = static_cast<int>(weights.size());
  ZT_CHECK(stages >= 1 && stages <= units, "pipeline: ", stages, " stages for a model of ", units,
           " units (the embedding, ", units - 2, " decoder layers and the head): each stage needs at least one");
  const int64_t bottleneck = smallest_bottleneck(weights, stages);
  std::vector<int> bounds{0};
  size_t begin = 0;
  for (int stage = 0; stage + 1 < stages; ++stage) {
    const int later = stages - stage - 1;  // stages after this one
    // The most units this stage can take: within the bottleneck, with what is left still
    // splitting into the later stages within it.
    size_t chosen = 0;
    int64_t sum = 0;
    for (size_t end = begin + 1; end <= weights.size(); ++end) {
      sum += weights[end - 1];
      if (sum > bottleneck) break;
      if (static_cast<int>(weights.size() - end) >= later && parts_needed(weights, end, bottleneck) <= later)
        chosen = end;
    }
    ZT_CHECK(chosen > begin, "partition_units: no split of stage ", stage, " reaches the bottleneck ", bottleneck);
    bounds.push_back(static_cast<int>(chosen));
    begin = chosen;
  }
  bounds.push_back(units);
  return bounds;
}

}  // namespace zt
