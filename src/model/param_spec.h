// The parameters of a model as HF names them, with their shapes, roles and ZeRO units. This list
// drives the flat-buffer layout, loading, `zerotune init`, LoRA targeting and weight decay. Each
// architecture declares its list (architecture.h); the units and ties declared here are what
// ZeRO's gathering, prefetching and gradient reduction follow (param_store.h, "Units").
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace zt {

enum class ParamRole {
  Embedding,   // token (or position) embedding table [V, C]
  Linear,      // a projection weight [out, in] (HF nn.Linear layout)
  NormWeight,  // RMSNorm/LayerNorm scale [C]
  Bias,        // any bias [C]
};

struct ParamSpec {
  ParamSpec() = default;
  // The families list their specs as {name, shape, role, layer, module, unit, tied_to}; an
  // objective's own parameter names its owner too.
  ParamSpec(std::string name_, std::vector<int64_t> shape_, ParamRole role_, int layer_ = -1, std::string module_ = "",
            int unit_ = -1, std::string tied_to_ = "", std::string owner_ = "")
      : name(std::move(name_)), shape(std::move(shape_)), role(role_), layer(layer_), module(std::move(module_)),
        unit(unit_), tied_to(std::move(tied_to_)), owner(std::move(owner_)) {}

  std::string name;             // HF state-dict key, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  ParamRole role = ParamRole::Linear;
  int layer = -1;               // block index, -1 outside the blocks
  std::string module;           // "q_proj", "gate_proj", ... ("" for non-linear params)
  int unit = -1;                // ZeRO unit: 0 before the blocks, l+1 block l, L+1 after them
  std::string tied_to;          // non-empty: this parameter IS that one (a tied head reads the
                                // token embedding); it has no storage of its own and is neither
                                // loaded, initialised, checkpointed nor exported
  std::string owner;            // "" for the model's own; else the objective that adds it (the
                                // reward model's value head: train/objective.h), which loads or
                                // initialises it (load_base_weights skips it)

  int64_t numel() const;
  // DeepSpeed-Chat / HF Trainer: no weight decay on biases and norm weights.
  bool decays() const { return role == ParamRole::Embedding || role == ParamRole::Linear; }
  bool tied() const { return !tied_to.empty(); }
};

// The specs that own storage (every spec but the tied ones), in order.
std::vector<ParamSpec> stored_param_specs(const std::vector<ParamSpec>& specs);

// The parameter list of a model of config.model_type, in HF state-dict order (its
// architecture's row), tied parameters included (marked by tied_to).
std::vector<ParamSpec> model_param_specs(const ModelConfig& config);

}  // namespace zt
