// Translation of a DeepSpeed JSON config (the file given to --deepspeed) into TrainConfig.
//
// Every key of DeepSpeed 0.14.4's schema is known, at every level we read:
//  - translated: batch sizes, gradient_clipping, steps_per_print, optimizer (Adam/AdamW),
//    scheduler (WarmupLR/WarmupDecayLR/WarmupCosineLR), fp16 (loss scaler), bf16/bfloat16,
//    zero_optimization (stage, buckets, overlap, stage3_* knobs, offload to cpu);
//  - accepted only at the value that leaves the math unchanged (prescale_gradients false,
//    gradient_predivide_factor 1, sparse_gradients false, fp16.auto_cast false, amsgrad false,
//    bias_correction true, zero_quantized_* false, ...), else an error naming the key;
//  - the monitors: tensorboard and csv_monitor written by rank 0 (train/monitors.h); wandb and
//    comet refused when enabled (web services: compute nodes often have no network);
//  - ignored with one note each: tooling (comms_logger, autotuning, ...; flops_profiler's
//    profile_step becomes --profile-step) and DeepSpeed implementation details that do not
//    change the result (memory_efficient_linear, nvme buffer sizes, ...);
//  - unsupported features that change what is computed (sparse_attention, pipeline,
//    compression_training, quantize_training, and amp / data_efficiency / curriculum_learning /
//    progressive_layer_drop / eigenvalue / elasticity when enabled): an error naming the key;
//  - anything else is a typo: an error with the nearest known key of that level.
// "auto" (the HF-integration placeholder) means "not set here": the INI file / flags or
// zerotune's default (which is DeepSpeed's) decide, except where the value is tied to another
// one as HF ties it: warmup_max_lr -> the optimizer's lr, total_num_steps -> the run's length,
// warmup_num_steps -> 1 (transformers' max(1, warmup); DeepSpeed then counts it as 2). Bucket and
// stage3_* sizes that HF derives from hidden_size keep DeepSpeed's defaults (they only change
// speed and memory, never the result).
// activation_checkpointing: in DeepSpeed this section only configures deepspeed.checkpointing
// for models that call it; HF models (and DeepSpeed-Chat) switch checkpointing on with
// model.gradient_checkpointing_enable(). So the section does not turn zerotune's activation
// checkpointing on (use --activation-checkpointing); its keys are checked and noted as ignored.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace zt {

// Applies the DeepSpeed config `ds` (read from `path`, named in every message) to `config`.
// Batch sizes are stored as given (0 for absent/"auto"); they are checked against world_size
// the way DeepSpeed checks them, but derived later by TrainConfig::resolve_batch_sizes, after
// the flags. Ignored keys append one line each to `notes`.
void apply_deepspeed_config(const nlohmann::json& ds, const std::string& path, int world_size, TrainConfig& config,
                            std::vector<std::string>& notes);

// Reads `path` (JSON; // and /* */ comments allowed, duplicate keys refused as DeepSpeed does)
// and applies it. Parse errors name the file, the line and the column.
void load_deepspeed_config(const std::string& path, int world_size, TrainConfig& config,
                           std::vector<std::string>& notes);

// A dtype as DeepSpeed's DtypeEnum spells it (data_types.grad_accum_dtype, communication_data_type):
// fp32 | float32 | float | torch.float32, bf16 | bfloat16 | torch.bfloat16, fp16 | float16 | half |
// torch.float16; nullopt for anything else (int8 included: never a gradient dtype here).
std::optional<DType> parse_deepspeed_dtype(const std::string& name);
const char* deepspeed_dtype_spellings();  // the list above, for messages

// Edit distance (optimal string alignment: insert, delete, substitute, swap adjacent), case-
// insensitive; used to suggest the key a typo meant. Exposed for the tests.
size_t key_edit_distance(const std::string& a, const std::string& b);

}  // namespace zt
