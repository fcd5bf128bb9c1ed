// LoraConfig: a LoRA adapter's settings (PEFT's LoraConfig: r, lora_alpha, lora_dropout,
// target_modules, use_rslora).
#pragma once
#include <string>
#include <vector>

namespace zt {

struct LoraConfig {
  int r = 0;                    // 0: LoRA off (full fine-tuning)
  double alpha = 8.0;           // PEFT default lora_alpha
  double dropout = 0.0;
  std::vector<std::string> targets;  // module names ("q_proj", ...) or {"all-linear"}
  bool rslora = false;          // scaling alpha/sqrt(r) instead of alpha/r
  bool enabled() const { return r > 0; }
};

}  // namespace zt
