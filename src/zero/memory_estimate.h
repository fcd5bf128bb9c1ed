// Memory needed for model states (parameters, gradients, optimizer state) per GPU and per CPU
// for each ZeRO stage and offload choice: DeepSpeed's estimator formulas, and the plan of
// zerotune's own buffers (flat buffers padded to a multiple of the world size, partition r a
// plain slice). `zerotune estimate` prints both side by side; the trainer prints its plan at
// start. Activations, workspaces and communication library buffers are not model states and
// are not counted here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/param_spec.h"

namespace zt {

// ---- zerotune's layout ----------------------------------------------------------------------

struct ZeroMemoryInputs {
  int64_t total_params = 0;        // every parameter, frozen ones included
  int64_t trainable_params = 0;    // parameters with gradients and optimizer state (LoRA: the
                                   // adapters; full fine-tuning: total_params)
  int64_t largest_layer_params = 0;  // DeepSpeed's "largest layer": the module with the most
                                     // parameters of its own (used by its stage-3 formula)
  int64_t gather_unit_params = 0;  // what stage 3 gathers at once in zerotune: the largest
                                   // decoder block, embedding or head (0: largest_layer_params)
  int world_size = 1;              // ranks (GPUs) in the job
  int gpus_per_node = 1;           // ranks per node (host memory is shared by these)
  int stage = 0;                   // ZeRO stage 0..3
  bool offload_optimizer = false;  // fp32 master + moments (+ gradient partition) on the host
  bool offload_params = false;     // stage 3: the compute-dtype parameter partition on the host
  double offload_ratio = 1.0;      // stage 3 with offload_optimizer: offload_optimizer.ratio, the share of
                                   // the master + state elements offloaded; the rest, (1 - ratio) of them,
                                   // on the device (the run keeps whole units: at most that many)
  int64_t compute_dtype_bytes = 2; // 2 for bf16/fp16, 4 for fp32
  int64_t grad_dtype_bytes = 4;    // data_types.grad_accum_dtype: 4 for fp32 (default), 2 for bf16/fp16
  int optimizer_state_floats = 2;  // fp32 state buffers per trainable element (Optimizer::state_names:
                                   // AdamW and Lamb 2, SGD with momentum 1, SGD without and LOMO 0)
  bool fused_optimizer = false;    // LOMO, AdaLomo: gradients only for the unit in flight (gather_unit_params,
                                   // plus its reduce-scatter slice from stage 1); no optimizer offload
  int64_t tensor_state_floats = 0; // per-tensor optimizer state (Optimizer::tensor_state: AdaLomo's rows +
                                   // columns of each trainable matrix, d of each vector), whole on every rank
  // DeepSpeed zero_optimization defaults (elements). allgather_bucket_size is not an input:
  // stages 1/2 gather the updated parameters in place into the flat buffer, with no staging.
  int64_t reduce_bucket_size = 500000000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int hpz_partition_size = 1;      // ZeRO++ hpZ (stage 3, several ranks): a secondary partition over this many ranks
};

// Per-rank bytes of zerotune's model-state buffers. With W = world_size, P = total_params
// padded up to a multiple of W, T = trainable_params padded likewise, c = compute_dtype_bytes:
struct ZeroMemoryPlan {
  // element counts
  int64_t padded_params = 0;         // P
  int64_t param_partition = 0;       // P / W: this rank's slice of the parameters (stage 3)
  int64_t padded_trainable = 0;      // T
  int64_t trainable_partition = 0;   // T / W: this rank's slice of master weights and moments
  int64_t gathered_params = 0;       // stage 3: parameters gathered at once: the gather unit U
                                     // plus, when stage3_prefetch_bucket_size > 0 and
                                     // 2U <= stage3_max_live_parameters, the prefetched next
                                     // unit (at most P; stage3_prefetches); 0 for stages 0-2
  bool master_aliases_params = false;  // fp32 compute without optimizer offload: the compute
                                       // parameters are the fp32 master weights (no copy)
  // device (GPU) bytes per rank
  int64_t device_param_bytes = 0;    // stages 0-2: P c; stage 3: (P/W) c (0 when offload_params)
                                     // + gathered_params c
  int64_t device_grad_bytes = 0;     // gradients, g = grad_dtype_bytes: stages 0/1: T g; stages 2/3:
                                     // (T/W) g; fused optimizer: U 4 (+ (U/W) 4 from stage 1), U the
                                     // gather unit
  int64_t device_grad_bucket_bytes = 0;  // stages 2/3: one reduce bucket of min(reduce_bucket_size, T)
                                         // elements, g bytes each; else 0
  int64_t device_master_bytes = 0;   // fp32 master weights: stage 0: T 4, stages 1-3: (T/W) 4;
                                     // 0 when offloaded (offload_ratio < 1: the resident elements' 4 each)
                                     // or aliased
  int64_t device_optimizer_bytes = 0;  // optimizer state, s = optimizer_state_floats: 4 s T
                                       // (stage 0) or 4 s T/W (AdamW: 8), + 4 tensor_state_floats
                                       // (whole on every rank); 0 when offloaded
  int64_t device_secondary_param_bytes = 0;  // ZeRO++ hpZ, stage 3: (P/R) c, R = hpz_partition_size (persistent
                                             // units have none: an upper bound)
  int64_t device_total_bytes = 0;    // the sum of the device_* bytes above
  // host (CPU) bytes per rank (all 0 without offload)
  int64_t host_master_bytes = 0;     // offload_optimizer: (T/W) 4
  int64_t host_optimizer_bytes = 0;  // offload_optimizer: (T/W) 4 s + 4 tensor_state_floats
  int64_t host_grad_bytes = 0;       // offload_optimizer: (T/W) g, the reduced gradient
                                     // partition the CPU Adam reads
  int64_t host_param_bytes = 0;      // offload_params: (P/W) c
  int64_t host_total_bytes = 0;      // the sum of the host_* bytes above
  int64_t host_total_bytes_per_node = 0;  // host_total_bytes * gpus_per_node

  nlohmann::json to_json() const;
};

// The plan for one configuration. Pure arithmetic; throws a zt::Error naming the input when
// the inputs are inconsistent (counts <= 0, trainable > total, stage outside 0..3, offload of
// the optimizer with stage 0 or of parameters below stage 3, world not a multiple of
// gpus_per_node, ...).
ZeroMemoryPlan zero_memory_plan(const ZeroMemoryInputs& inputs);

// ---- DeepSpeed's formulas -------------------------------------------------------------------

// DeepSpeed's estimate for one configuration, in bytes. Stage 2: estimate_zero2_model_states_
// mem_needs (deepspeed/runtime/zero/stage_1_and_2.py), stage 3: estimate_zero3_model_states_
// mem_needs (stage3.py), both with additional_buffer_factor 1.5 and Python's int() truncation.
// DeepSpeed has no estimator for stages 0 and 1; those rows apply its stage-2 per-element
// accounting (2 bytes fp16 params + 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam
// states) with nothing partitioned (stage 0) or with the fp16 gradients unpartitioned (stage 1).
// The formulas assume 16-bit compute and count every parameter as trainable.
struct DeepSpeedEstimate {
  int64_t gpu_bytes = 0;                 // per GPU
  int64_t cpu_bytes = 0;                 // per node; stage 3: with zero_init=True
  int64_t cpu_bytes_without_zero_init = 0;  // stage 3 with zero_init=False (stages 0-2: = cpu_bytes)
  std::string source;                    // which DeepSpeed function or derivation
};

DeepSpeedEstimate deepspeed_estimate(int64_t total_params, int64_t largest_layer_params, int gpus_per_node,
                                     int nodes, int stage, bool offload_optimizer, bool offload_params);

// ---- parameter counts of a model ------------------------------------------------------------

struct ModelParamCounts {
  int64_t total = 0;          // all specs
  int64_t trainable = 0;      // LoRA adapters when there are any, else all
  int64_t largest_layer = 0;  // DeepSpeed: max over modules of their own parameters
  int64_t gather_unit = 0;    // zerotune stage 3: max over decoder blocks (all their
                              // parameters) and the modules outside the blocks
};

// Counts over a model's parameter specs plus its LoRA adapter specs (empty without LoRA).
ModelParamCounts count_model_params(const std::vector<ParamSpec>& model_specs,
                                    const std::vector<ParamSpec>& lora_specs);

// Shapes assumed when only a parameter count N is known (rule of thumb, LLaMA-like models):
// N ~ 12 L C^2 with L ~ C / 128 layers (llama-7b: C 4096, L 32; llama-13b: 5120, 40), so the
// hidden size is C = cbrt(128 N / 12); the largest layer is the embedding, 32000 x C; a block
// holds 12 C^2 parameters. Both are capped at N. For 6.74e9 parameters: C ~ 4158, largest
// layer ~ 133M (llama-7b: 131M), block ~ 207M (llama-7b: 202M).
int64_t rule_of_thumb_hidden_size(int64_t total_params);
int64_t rule_of_thumb_largest_layer(int64_t total_params);
int64_t rule_of_thumb_block(int64_t total_params);
// The parameter tensors' shapes under that rule (for per-tensor optimizer state): L = C / 128
// blocks of 4 [C, C] attention matrices, 2 [F, C] and 1 [C, F] MLP matrices (F = 8C/3) and 2
// norms [C]; the embedding and the head [32000, C]; the final norm [C].
std::vector<std::vector<int64_t>> rule_of_thumb_shapes(int64_t total_params);

// A parameter count as users write it: 6738415616, 7e9, 6.7B, 125M, 350k (suffixes k/K, M,
// B/G, T: powers of 1000). Must be a whole number >= 1; errors name `flag` and the text.
int64_t parse_param_count(const std::string& text, const std::string& flag);

}  // namespace zt
