// The reward model's value head (DeepSpeed-Chat's RewardModel.v_head: nn.Linear(E, 1, bias=False)
// over the decoder's last hidden state, E = OPT's word_embed_proj_dim or the hidden size) as a
// parameter, and its names: "v_head.weight" in training, checkpoints and DeepSpeed-Chat's saved
// model; "score.weight" in transformers' ...ForSequenceClassification with num_labels 1.
#pragma once
#include <string>

#include "model/config.h"
#include "model/param_spec.h"

namespace zt {

inline constexpr const char* kValueHeadModule = "v_head";
inline constexpr const char* kValueHeadWeight = "v_head.weight";
inline constexpr const char* kSequenceClassificationScore = "score.weight";

// v_head.weight [1, E] in the head unit (L+1: ZeRO-3 gathers it with the final norm), a linear
// weight (decayed, as DeepSpeed-Chat's optimizer groups decay it), added by `owner`.
inline ParamSpec value_head_spec(const ModelConfig& config, const std::string& owner) {
  ParamSpec spec;
  spec.name = kValueHeadWeight;
  spec.shape = {1, config.embed_dim()};
  spec.role = ParamRole::Linear;
  spec.module = kValueHeadModule;
  spec.unit = static_cast<int>(config.num_hidden_layers) + 1;
  spec.owner = owner;
  return spec;
}

}  // namespace zt
