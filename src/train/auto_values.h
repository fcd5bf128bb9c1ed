// Saying what was decided for the DeepSpeed JSON: every "auto" value resolved the way the HF
// Trainer's DeepSpeed integration resolves it (from the flags given, else the Trainer's
// defaults: learning_rate 5e-5, max_grad_norm 1.0, per_device_train_batch_size 8, ...), and
// every command-line value that overrides a value the JSON gave, each as one note line.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace zt {

// --bf16 / --fp16 (TrainingArguments' bf16 / fp16): the compute dtype, and what the JSON's
// "enabled": "auto" resolves to (HF's fill_match: the flag's value; without a flag false, i.e.
// fp32). A flag that contradicts an explicit "enabled" (--bf16 with bf16.enabled false or
// fp16.enabled true, and the reverse) or both flags together are errors. Without a flag an
// explicit "enabled": true rules, as DeepSpeed reads it. Puts a "precision: ..." note first in
// `notes` (rank 0 prints the notes before the banner), then one note per "auto" "enabled".
void resolve_precision(TrainConfig& config, bool bf16_flag, bool fp16_flag, std::vector<std::string>& notes);

// After the flags are applied to `config`: resolves config.deepspeed_keys.automatic in place
// and appends one note per "auto" key (the precision keys: resolve_precision) and per overriding flag. `flag_given(name)` says whether
// the option --name was given (command line or --config file).
void resolve_deepspeed_choices(TrainConfig& config, const std::function<bool(const std::string&)>& flag_given,
                               std::vector<std::string>& notes);

}  // namespace zt
