// `zerotune export`: a checkpoint's weights as an HF model directory (safetensors, sharded above
// a size, + config.json + tokenizer files; LoRA merged into the base weights) or as a PEFT
// adapter directory (adapter_config.json + adapter_model.safetensors with PEFT's key names).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace zt {

struct ExportOptions {
  std::string checkpoint_dir;
  std::string model_dir;   // the base model the checkpoint was trained from
  std::string out_dir;
  std::string format;      // hf | peft
  bool merge = false;      // hf: fold LoRA into the base weights (required for a LoRA checkpoint)
  // The stored dtype: fp32, bf16 or fp16; empty (--dtype auto): the run's compute dtype, as
  // DeepSpeed-Chat saves an fp16 run's model in fp16 (the manifest's config.compute_dtype;
  // fp32 for a checkpoint that does not record it).
  std::optional<DType> dtype;
  int64_t max_shard_bytes = 0;  // hf: 0 = HF's default (5 GB)
};

// Returns a one-line summary of what was written (with the dtype and where it came from).
std::string export_checkpoint(const ExportOptions& options);

}  // namespace zt
