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
#include "core/quant4bit.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "optim/optimizer_config.h"
#include "optim/schedule_config.h"
#include "zero/zero_config.h"

namespace zt {

// What the DeepSpeed JSON said, key by key (dotted paths, "optimizer.params.lr"): the keys given
// as "auto" and the values given, so that the resolution of each "auto" and each command-line
// value that overrides the JSON can be said once at start (train/auto_values.h).
struct DeepSpeedKeys {
  std::vector<std::string> automatic;
  std::map<std::string, nlohmann::json> given;
};

// DeepSpeed's "tensorboard" and "csv_monitor" sections (train/monitors.h says what rank 0
// writes): the files go to output_path/job_name/, with DeepSpeed's defaults (output_path "": the
// working directory; job_name "DeepSpeedJobName").
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
  std::string directory() const;  // output_path/job_name
};

// Pipeline parallelism (issue 32, docs/pipeline.md): --pipeline-stages and its companions, or
// DeepSpeed's "pipeline" section.
struct PipelineConfig {
  int64_t stages = 1;                          // P: the ranks split into P stages x world / P replicas
  std::string schedule = "1f1b";               // gpipe | 1f1b | interleaved (pipe/pipe_schedule.h)
  int64_t chunks = 1;                          // V: model chunks per rank (interleaved: at least 2)
  std::string partition_method = "parameters";  // parameters | uniform | type:REGEX (pipe/stage_partition.h)
  bool enabled() const { return stages > 1; }
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
  // data_types.grad_accum_dtype / --grad-accum-dtype: the gradients' storage, fp32 (default) or the
  // 16-bit compute dtype (zero/zero_engine.h check_gradient_dtype says which runs take it).
  DType grad_accum_dtype = DType::F32;
  LossScalerConfig loss_scaler;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  LoraConfig lora;
  // --quantize: the frozen base stored 4-bit (QLoRA). Not given: the model's own
  // quantization_config (a bitsandbytes 4-bit checkpoint), else none (quantization()).
  QuantConfig quantize;
  bool activation_checkpointing = false;
  bool offload_activations = false;  // the checkpointed block inputs in pinned host memory

  std::string model_dir, data_dir, out_dir, deepspeed_config_path;
  DeepSpeedKeys deepspeed_keys;    // what the JSON gave (empty without --deepspeed)
  int64_t deepspeed_profile_step = 0;  // flops_profiler.profile_step when enabled (--profile-step wins)
  MonitorConfig tensorboard;       // TensorBoard event files of the metrics (rank 0)
  MonitorConfig csv_monitor;       // DeepSpeed's CSV files of the metrics (rank 0)
  uint64_t seed = 42;
  bool shuffle = true;
  int64_t epochs = 1;
  int64_t max_steps = 0;           // 0: run the epochs
  std::string dump_step0_path;     // oracle/debug: logits, loss and gradients of step 0
  std::string data_split;          // the split of data_dir to train on (empty: the only one there)
  std::string eval_data_dir;       // evaluation split (token shards); empty: no evaluation
  std::string eval_split;          // the split of eval_data_dir to evaluate on (empty: the only one there)
  int64_t eval_every = 0;          // evaluate every N steps (0: only at the end of each epoch)
  bool eval_at_start = false;      // evaluate before the first step too (DeepSpeed-Chat's "Epoch 0" ppl)
  std::string dump_final_path;     // tests/debug: every trainable parameter after the last step
  double comm_timeout_seconds = 1800.0;  // a collective slower than this aborts the job
  bool group_by_length = false;    // micro-batches of similar lengths within each global batch
  bool packing = false;            // each micro-batch's samples packed into rows (data/packing.h)
  std::string objective = "sft";   // --objective: sft | reward | dpo (train/objective.h)
  double dpo_beta = 0.1;           // --dpo-beta: DPO's beta (TRL's default), the reference's pull
  double dpo_label_smoothing = 0.0;  // --dpo-label-smoothing: cDPO's label noise in [0, 0.5)
  int64_t head_chunk_rows = 0;     // rows per LM-head + cross-entropy chunk; 0: automatic (ModelOptions)
  int64_t save_every = 0;          // checkpoint every N steps (0: never by count)
  bool save_at_end = true;         // checkpoint after the last step
  bool save_hf_at_end = false;     // then also OUT/hf: the HF model (16-bit as trained, LoRA merged), as
                                   // DeepSpeed's stage3_gather_16bit_weights_on_model_save + a final save
  int64_t keep_last = 0;           // keep only the newest K checkpoints (0: all)
  std::string resume;              // "auto" (the latest under OUT/checkpoints, if any) or a checkpoint dir
  std::string device = "auto";     // auto | cpu | cuda (GPU local_rank % visible devices); auto: cuda when built
                                   // with CUDA and a GPU is visible (backend/make_backend.h resolve_device)
  std::string comm = "auto";       // GPU collectives: auto | nccl | mpi (host-staged)
  PipelineConfig pipeline;

  // The data-parallel ranks of `world_size`: world_size / pipeline.stages (every rank without a pipeline).
  int data_parallel_size(int world_size) const;

  // Fills the three batch numbers from whichever are given (DeepSpeed's rules, with the
  // data-parallel size as the world: DeepSpeed's pipeline engine counts replicas, not stages)
  // and checks that they agree; errors show the arithmetic.
  void resolve_batch_sizes(int world_size);
  nlohmann::json to_json() const;  // the resolved configuration, for run.json
};

// The 4-bit storage of a run's base: --quantize, else the model's quantization_config. A
// bitsandbytes checkpoint cannot be re-quantized differently: a --quantize that disagrees with
// its quantization_config is an error.
QuantConfig run_quantization(const QuantConfig& requested, const QuantConfig& model, const std::string& model_dir);

}  // namespace zt
