// The ZeRO stage x offload x activation-checkpointing choices the memory model is asked about
// (`zerotune estimate`'s rows and --max-seq-len table, `zerotune autotune`'s search space, the
// trainer's "these would fit" list), in DeepSpeed's vocabulary, and the printing of a
// prediction's terms (memory_model.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace zt {

struct ZeroChoice {
  int stage = 0;
  bool offload_optimizer = false;  // zero_optimization.offload_optimizer.device cpu
  bool offload_params = false;     // zero_optimization.offload_param.device cpu (stage 3)
  bool activation_checkpointing = false;
  // > 0: ZeRO++ at stage 3 (qwZ + hpZ over this many ranks, the ranks per node + qgZ), which
  // autotune tries where the job spans several nodes.
  int zeropp_ranks_per_node = 0;
  // > 0: --pipeline-stages P (autotune's search over P); 0: the configuration's own.
  int pipeline_stages = 0;
};

// Every stage and offload DeepSpeed offers, in this order: stage 0; 1 and 2 without and with
// offload_optimizer; 3 without offload, with offload_optimizer, with both. An optimizer fused
// into backward (LOMO, AdaLomo) updates on the device: its stage 3 offloads parameters only,
// and it has no offload_optimizer rows. Activation checkpointing off in all.
std::vector<ZeroChoice> zero_offload_choices(bool fused_optimizer);

// `config` with the choice's stage, offload devices, activation checkpointing and ZeRO++ (a stage
// below 3 drops ZeRO++, which is stage 3's).
TrainConfig with_choice(TrainConfig config, const ZeroChoice& choice);
// "zero_optimization.stage 3 + offload_optimizer cpu + offload_param cpu + --activation-checkpointing"
std::string choice_text(const ZeroChoice& choice);
// DeepSpeed's autotuner's experiment name for it, with the offload and checkpointing keys:
// z3_oocpu_opcpu_acT_gas1_tmbspg4 (stage, offload_optimizer, offload_param, activation
// checkpointing, gradient_accumulation_steps, train_micro_batch_size_per_gpu).
std::string choice_experiment_name(const ZeroChoice& choice, int64_t accumulation, int64_t micro_batch);

// A prediction's terms (MemoryPrediction::device_terms / host_terms) in memory_terms() order,
// then any others, as JSON {term: bytes}.
nlohmann::ordered_json terms_json(const std::map<std::string, int64_t>& terms);

}  // namespace zt
