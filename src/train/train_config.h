// TrainConfig: everything `zerotune train` needs to know, resolved from (in increasing
// priority) DeepSpeed's defaults, the DeepSpeed JSON (--deepspeed), an INI file (--config) and
// command-line flags. run.json records the resolved result.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace zt {

struct OptimizerConfig {
  std::string type = "adamw";  // adamw (DeepSpeed "Adam"/"AdamW" both map here, see ds_config)
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // false: DeepSpeed "Adam" with adam_w_mode=false, i.e. L2-regularised Adam. ds_config accepts
  // it only with weight_decay 0, where it is the same update as AdamW; the optimizer must
  // refuse adam_w_mode=false with a non-zero weight_decay (e.g. one set later by --weight-decay).
  bool adam_w_mode = true;
};

struct SchedulerConfig {
  // constant | WarmupLR | WarmupDecayLR | WarmupCosineLR (DeepSpeed) | linear | cosine (HF,
  // with warmup). Names are matched as DeepSpeed and HF spell them.
  std::string type = "constant";
  // DeepSpeed WarmupLR / WarmupDecayLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  // DeepSpeed JSON "warmup_max_lr": "auto" (HF integration): the peak is the optimizer's lr,
  // whatever later flags set it to; learning_rate_at and to_json read it that way.
  bool warmup_max_lr_auto = false;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR, linear, cosine; 0: the
                                    // run's length (the trainer fills it in)
  // DeepSpeed WarmupCosineLR (ratios of the optimizer's lr)
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
  // HF linear/cosine: warmup steps from 0 to the optimizer's lr, then decay to 0
  int64_t warmup_steps = 0;
};

struct LossScalerConfig {  // DeepSpeed "fp16" section (dynamic when loss_scale == 0)
  double loss_scale = 0.0;
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

struct ZeroConfig {  // DeepSpeed "zero_optimization"; the ZeRO issue gives these their effect
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  bool round_robin_gradients = false;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  int64_t stage3_model_persistence_threshold = INT64_MAX;  // DeepSpeed: sys.maxsize
  bool stage3_gather_16bit_weights_on_model_save = false;
  std::string offload_optimizer_device = "none";  // none | cpu
  bool offload_optimizer_pin_memory = false;
  std::string offload_param_device = "none";     // none | cpu (stage 3 only)
  bool offload_param_pin_memory = false;
};

struct LoraConfig {
  int r = 0;                    // 0: LoRA off (full fine-tuning)
  double alpha = 8.0;           // PEFT default lora_alpha
  double dropout = 0.0;
  std::vector<std::string> targets;  // module names ("q_proj", ...) or {"all-linear"}
  bool rslora = false;          // scaling alpha/sqrt(r) instead of alpha/r
  bool enabled() const { return r > 0; }
};

// What the DeepSpeed JSON said, key by key (dotted paths, "optimizer.params.lr"): the keys given
// as "auto" and the values given, so that the resolution of each "auto" and each command-line
// value that overrides the JSON can be said once at start (train/auto_values.h).
struct DeepSpeedKeys {
  std::vector<std::string> automatic;
  std::map<std::string, nlohmann::json> given;
};

struct TrainConfig {
  // Batch arithmetic (DeepSpeed): train_batch_size = micro_batch * accumulation * world_size.
  // 0 means "not given, derive it".
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t gradient_accumulation_steps = 0;
  double gradient_clipping = 0.0;  // 0: off
  int64_t steps_per_print = 10;
  DType compute_dtype = DType::F32;
  LossScalerConfig loss_scaler;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  LoraConfig lora;
  bool activation_checkpointing = false;

  std::string model_dir, data_dir, out_dir, deepspeed_config_path;
  DeepSpeedKeys deepspeed_keys;    // what the JSON gave (empty without --deepspeed)
  int64_t deepspeed_profile_step = 0;  // flops_profiler.profile_step when enabled (--profile-step wins)
  uint64_t seed = 42;
  bool shuffle = true;
  int64_t epochs = 1;
  int64_t max_steps = 0;           // 0: run the epochs
  std::string dump_step0_path;     // oracle/debug: logits, loss and gradients of step 0
  std::string data_split;          // the split of data_dir to train on (empty: the only one there)
  std::string eval_data_dir;       // evaluation split (token shards); empty: no evaluation
  std::string eval_split;          // the split of eval_data_dir to evaluate on (empty: the only one there)
  int64_t eval_every = 0;          // evaluate every N steps (0: only at the end of each epoch)
  std::string dump_final_path;     // tests/debug: every trainable parameter after the last step
  double comm_timeout_seconds = 1800.0;  // a collective slower than this aborts the job
  bool group_by_length = false;    // micro-batches of similar lengths within each global batch
  int64_t save_every = 0;          // checkpoint every N steps (0: never by count)
  bool save_at_end = true;         // checkpoint after the last step
  int64_t keep_last = 0;           // keep only the newest K checkpoints (0: all)
  std::string resume;              // "auto" (the latest under OUT/checkpoints, if any) or a checkpoint dir
  std::string device = "auto";     // auto | cpu | cuda (GPU local_rank % visible devices); auto: cuda when built
                                   // with CUDA and a GPU is visible (backend/make_backend.h resolve_device)
  std::string comm = "auto";       // GPU collectives: auto | nccl | mpi (host-staged)

  // Fills the three batch numbers from whichever are given (DeepSpeed's rules) and checks that
  // they agree; errors show the arithmetic.
  void resolve_batch_sizes(int world_size);
  nlohmann::json to_json() const;  // the resolved configuration, for run.json
};

}  // namespace zt
