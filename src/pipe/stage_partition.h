// Which units of the model each pipeline stage holds (issue 32): DeepSpeed's partition_method over
// zerotune's units (param_store.h "Units": unit 0 the embedding, units 1..L the decoder layers,
// unit L+1 the final norm and the head), as contiguous ranges, the embedding on the first stage and
// the head on the last. Each unit gets a weight and the stages split the units so that the
// heaviest stage is as light as it can be (DeepSpeed's partition_balanced finds the same
// bottleneck; ties go to the earlier stages here):
//   parameters (DeepSpeed's default): the unit's trainable parameters (DeepSpeed counts the
//     parameters with requires_grad; under LoRA the adapters). A tied head (OPT, Qwen2) counts the
//     embedding it reads as well: the last stage holds a copy of it (DeepSpeed's TiedLayerSpec).
//   uniform: every unit weighs 1.
//   type:REGEX: a unit weighs 1 when REGEX matches its type, else 0, ignoring case as DeepSpeed
//     does. The types: "Embedding", "DecoderLayer", "Head" (e.g. `type:decoder` balances the
//     decoder layers and lets the embedding and the head ride along).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_spec.h"

namespace zt {

enum class PartitionMethod { Parameters, Uniform, Type };

struct PartitionRule {
  PartitionMethod method = PartitionMethod::Parameters;
  std::string type_regex;  // for Type
};

// "parameters", "uniform", "type:REGEX"; anything else (or an empty or invalid REGEX) is an
// error naming `where` (a config file and key, or a flag).
PartitionRule parse_partition_method(const std::string& text, const std::string& where);

struct UnitSummary {
  std::string type;                  // "Embedding", "DecoderLayer" or "Head"
  int64_t parameters = 0;            // every parameter the unit reads (a tied one included)
  int64_t trainable_parameters = 0;  // of those, the trainable ones
};

// Per unit, from the parameter list (in param_spec.h order, tied parameters included) and which
// specs are trainable (ParameterPlan::trainable).
std::vector<UnitSummary> summarize_units(const std::vector<ParamSpec>& specs, const std::vector<bool>& trainable);

// The weight `rule` gives each unit.
std::vector<int64_t> unit_weights(const std::vector<UnitSummary>& units, const PartitionRule& rule);

// The first unit of each of `stages` stages, plus the unit count at the end (stages + 1 entries):
// stage s holds units [bounds[s], bounds[s + 1]), at least one each. More stages than units is an
// error naming both counts.
std::vector<int> partition_units(const std::vector<int64_t>& weights, int stages);

}  // namespace zt
