// Export of a reward model (a checkpoint of `train --objective reward`, whose layout holds the
// value head, model/value_head.h) as transformers' <Family>ForSequenceClassification with
// num_labels 1: the decoder's weights under their HF names, score.weight = v_head.weight, no LM
// head; config.json's architectures and num_labels say so. transformers reads the score at the
// last token before the first pad id (pad_token_id of config.json), so a sequence scored as
// zerotune scores it is prompt + response without the EOS after it (docs/reward-model.md).
// Or in DeepSpeed-Chat's layout (export --format dschat), what its save_hf_format writes for a
// RewardModel and its step 3 (create_critic_model) loads: pytorch_model.bin holding the state
// dict of RewardModel(AutoModel): v_head.weight and the base model's weights under
// "rwtranformer." (sic: its attribute's name), config.json and the tokenizer files.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/parameter_plan.h"

namespace zt {

// Whether the checkpoint's layout holds the value head; if so, adds its spec to `plan`.
bool add_checkpoint_value_head(ParameterPlan& plan, const ModelConfig& config, const nlohmann::json& manifest);

// The name a parameter of a reward model is exported under: score.weight for the value head, ""
// (left out) for the LM head, the name itself otherwise.
std::string sequence_classification_name(const std::string& name);

// The name a parameter of a reward model has in DeepSpeed-Chat's layout: v_head.weight as it is,
// the decoder's model.X as rwtranformer.X (AutoModel's names are the causal LM's without
// "model."), "" (left out) for the LM head.
std::string deepspeed_chat_reward_name(const std::string& name);

// Rewrites out_dir/config.json for <Family>ForSequenceClassification (num_labels 1).
void write_sequence_classification_config(const std::string& out_dir);

}  // namespace zt
