// LoRA target names as PEFT reads `target_modules`, turned into the module names zerotune
// adapts (q_proj, v_proj, ...; every layer's instance of each):
//  - a list of names: each matches the modules whose full path (model.layers.0.self_attn.q_proj)
//    is the name or ends with "." + name, so "q_proj" and "self_attn.q_proj" both work;
//  - "all-linear": every linear layer but the output head;
//  - a regular expression (PEFT's target_modules given as one string; on the command line a
//    value holding any of * ( ) [ ] | \ ^ $ + ? { }): the modules whose full path it matches
//    entirely (Python's re.fullmatch, here ECMAScript std::regex).
// zerotune adapts a module in every layer or in none, and adapts linear layers only: a target
// that selects some layers' instances, or the output head / an embedding (which PEFT can adapt),
// is refused with a message saying so.
#pragma once
#include <string>
#include <vector>

#include "model/param_spec.h"

namespace zt {

// Command-line text -> targets: one regex when it holds regex characters, else the names
// separated by commas and/or spaces ("q_proj, v_proj", "q_proj v_proj").
std::vector<std::string> parse_lora_targets(const std::string& text);

// The module names `targets` select in a model with `specs` (in the model's order), or
// {"all-linear"} for all-linear. Errors name the target and the modules there are.
std::vector<std::string> match_lora_targets(const std::vector<ParamSpec>& specs, const std::vector<std::string>& targets);

// Whether a target is a regular expression (holds one of the characters above).
bool is_lora_target_regex(const std::string& target);

}  // namespace zt
