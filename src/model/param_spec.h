// The parameters of a model as HF names them, with their shapes and roles. This list drives
// the flat-buffer layout, loading, `zerotune init`, LoRA targeting and weight decay.
#pragma once
#include <cstdint>
#include <string>
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
  std::string name;             // HF state-dict key, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  ParamRole role;
  int layer = -1;               // block index, -1 outside the blocks
  std::string module;           // "q_proj", "gate_proj", ... ("" for non-linear params)

  int64_t numel() const;
  // DeepSpeed-Chat / HF Trainer: no weight decay on biases and norm weights.
  bool decays() const { return role == ParamRole::Embedding || role == ParamRole::Linear; }
};

// The parameter list of a model of config.model_type, in HF state-dict order.
std::vector<ParamSpec> model_param_specs(const ModelConfig& config);

}  // namespace zt
