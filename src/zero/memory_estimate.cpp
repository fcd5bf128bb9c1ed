// ZeRO memory arithmetic (see memory_estimate.h): zerotune's per-rank plan, DeepSpeed's
// estimator formulas, and the parameter counts of a model they start from.
#include "zero/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "zero/zero_config.h"

namespace zt {

namespace {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

void check_inputs(const ZeroMemoryInputs& in) {
  ZT_CHECK(in.total_params > 0, "memory plan: total_params = ", in.total_params, ": must be > 0");
  ZT_CHECK(in.trainable_params > 0 && in.trainable_params <= in.total_params, "memory plan: trainable_params = ",
           in.trainable_params, ": must be in [1, total_params = ", in.total_params, "]");
  ZT_CHECK(in.largest_layer_params > 0 && in.largest_layer_params <= in.total_params,
           "memory plan: largest_layer_params = ", in.largest_layer_params, ": must be in [1, total_params = ",
           in.total_params, "]");
  ZT_CHECK(in.gather_unit_params >= 0 && in.gather_unit_params <= in.total_params,
           "memory plan: gather_unit_params = ", in.gather_unit_params, ": must be in [0, total_params = ",
           in.total_params, "]");
  ZT_CHECK(in.world_size >= 1, "memory plan: world_size = ", in.world_size, ": must be >= 1");
  ZT_CHECK(in.gpus_per_node >= 1 && in.world_size % in.gpus_per_node == 0, "memory plan: gpus_per_node = ",
           in.gpus_per_node, ": must be >= 1 and divide world_size = ", in.world_size);
  ZT_CHECK(in.stage >= 0 && in.stage <= 3, "memory plan: ZeRO stage ", in.stage, ": must be 0, 1, 2 or 3");
  ZT_CHECK(!in.offload_optimizer || in.stage >= 1, "memory plan: offload_optimizer needs ZeRO stage 1, 2 or 3 (stage ",
           in.stage, ")");
  ZT_CHECK(!in.fused_optimizer || !in.offload_optimizer,
           "memory plan: an optimizer fused into backward (LOMO, AdaLomo) updates on the device: no optimizer offload");
  ZT_CHECK(in.tensor_state_floats >= 0, "memory plan: tensor_state_floats = ", in.tensor_state_floats, ": must be >= 0");
  ZT_CHECK(!in.offload_params || in.stage == 3, "memory plan: offload_param needs ZeRO stage 3 (stage ", in.stage, ")");
  ZT_CHECK(in.offload_ratio >= 0.0 && in.offload_ratio <= 1.0, "memory plan: offload_ratio = ", in.offload_ratio,
           ": must be in [0, 1]");
  ZT_CHECK(in.compute_dtype_bytes == 2 || in.compute_dtype_bytes == 4, "memory plan: compute_dtype_bytes = ",
           in.compute_dtype_bytes, ": must be 2 (bf16/fp16) or 4 (fp32)");
  ZT_CHECK(in.grad_dtype_bytes == 4 || (in.grad_dtype_bytes == 2 && in.compute_dtype_bytes == 2 && !in.fused_optimizer),
           "memory plan: grad_dtype_bytes = ", in.grad_dtype_bytes, ": must be 4 (fp32), or 2 with 16-bit compute and an "
           "optimizer that is not fused into backward");
  ZT_CHECK(in.reduce_bucket_size > 0, "memory plan: reduce_bucket_size = ", in.reduce_bucket_size, ": must be > 0");
  ZT_CHECK(in.stage3_max_live_parameters > 0, "memory plan: stage3_max_live_parameters = ",
           in.stage3_max_live_parameters, ": must be > 0");
  ZT_CHECK(in.stage3_prefetch_bucket_size >= 0, "memory plan: stage3_prefetch_bucket_size = ",
           in.stage3_prefetch_bucket_size, ": must be >= 0");
}

// Python's int() of a float: truncation toward zero.
int64_t python_int(double value) { return static_cast<int64_t>(value); }

constexpr double kAdditionalBufferFactor = 1.5;  // DeepSpeed's default additional_buffer_factor

}  // namespace

nlohmann::json ZeroMemoryPlan::to_json() const {
  return {{"padded_params", padded_params},
          {"param_partition", param_partition},
          {"padded_trainable", padded_trainable},
          {"trainable_partition", trainable_partition},
          {"gathered_params", gathered_params},
          {"master_aliases_params", master_aliases_params},
          {"device_param_bytes", device_param_bytes},
          {"device_secondary_param_bytes", device_secondary_param_bytes},
          {"device_grad_bytes", device_grad_bytes},
          {"device_grad_bucket_bytes", device_grad_bucket_bytes},
          {"device_master_bytes", device_master_bytes},
          {"device_optimizer_bytes", device_optimizer_bytes},
          {"device_total_bytes", device_total_bytes},
          {"host_master_bytes", host_master_bytes},
          {"host_optimizer_bytes", host_optimizer_bytes},
          {"host_grad_bytes", host_grad_bytes},
          {"host_param_bytes", host_param_bytes},
          {"host_total_bytes", host_total_bytes},
          {"host_total_bytes_per_node", host_total_bytes_per_node}};
}

ZeroMemoryPlan zero_memory_plan(const ZeroMemoryInputs& in) {
  check_inputs(in);
  const int64_t world = in.world_size;
  const int64_t c = in.compute_dtype_bytes;
  ZeroMemoryPlan plan;
  plan.padded_params = round_up(in.total_params, world);
  plan.param_partition = plan.padded_params / world;
  plan.padded_trainable = round_up(in.trainable_params, world);
  plan.trainable_partition = plan.padded_trainable / world;

  // Parameters in the compute dtype.
  if (in.stage < 3) {
    plan.device_param_bytes = plan.padded_params * c;
  } else {
    const int64_t unit = in.gather_unit_params > 0 ? in.gather_unit_params : in.largest_layer_params;
    const bool prefetch_fits = stage3_prefetches(unit, unit, in.stage3_prefetch_bucket_size, in.stage3_max_live_parameters);
    plan.gathered_params = std::min(plan.padded_params, prefetch_fits ? 2 * unit : unit);
    const int64_t partition_bytes = plan.param_partition * c;
    if (in.offload_params)
      plan.host_param_bytes = partition_bytes;
    else
      plan.device_param_bytes = partition_bytes;
    plan.device_param_bytes += plan.gathered_params * c;
    if (in.hpz_partition_size > 1 && world > 1) plan.device_secondary_param_bytes = plan.padded_params / in.hpz_partition_size * c;
  }

  // Gradients (g bytes each: fp32, or 16-bit with data_types.grad_accum_dtype): whole for stages
  // 0/1 (all-reduced), this rank's partition plus the bucket being reduce-scattered for stages 2/3.
  // A fused optimizer's (fp32 only) are the unit in flight.
  const int64_t g = in.grad_dtype_bytes;
  if (in.fused_optimizer) {  // LOMO: one unit's gradients in flight, reduced and applied as backward completes it
    const int64_t unit = std::min(plan.padded_trainable,
                                  in.gather_unit_params > 0 ? in.gather_unit_params : in.largest_layer_params);
    plan.device_grad_bytes = unit * 4 + (in.stage >= 1 && world > 1 ? unit / world * 4 : 0);
  } else if (in.stage <= 1) {
    plan.device_grad_bytes = plan.padded_trainable * g;
  } else {
    plan.device_grad_bytes = plan.trainable_partition * g;
    plan.device_grad_bucket_bytes = std::min(in.reduce_bucket_size, plan.padded_trainable) * g;
  }

  // fp32 master weights and the optimizer's state: whole for stage 0, partitioned from stage 1.
  const int64_t optimizer_elements = in.stage == 0 ? plan.padded_trainable : plan.trainable_partition;
  if (in.offload_optimizer) {
    // offload_optimizer.ratio (stage 3): the first (1 - ratio) of the elements stay on the device.
    const int64_t resident =
        in.stage == 3 ? static_cast<int64_t>((1.0 - in.offload_ratio) * static_cast<double>(optimizer_elements)) : 0;
    const int64_t offloaded = optimizer_elements - resident;
    plan.host_master_bytes = offloaded * 4;
    plan.host_optimizer_bytes = offloaded * 4 * in.optimizer_state_floats + in.tensor_state_floats * 4;
    plan.host_grad_bytes = offloaded * g;
    plan.device_master_bytes = resident * 4;
    plan.device_optimizer_bytes = resident * 4 * in.optimizer_state_floats;
  } else {
    plan.master_aliases_params = c == 4;
    plan.device_master_bytes = plan.master_aliases_params ? 0 : optimizer_elements * 4;
    plan.device_optimizer_bytes = optimizer_elements * 4 * in.optimizer_state_floats + in.tensor_state_floats * 4;
  }

  plan.device_total_bytes = plan.device_param_bytes + plan.device_secondary_param_bytes + plan.device_grad_bytes +
                            plan.device_grad_bucket_bytes + plan.device_master_bytes + plan.device_optimizer_bytes;
  plan.host_total_bytes = plan.host_master_bytes + plan.host_optimizer_bytes + plan.host_grad_bytes +
                          plan.host_param_bytes;
  plan.host_total_bytes_per_node = plan.host_total_bytes * in.gpus_per_node;
  return plan;
}

DeepSpeedEstimate deepspeed_estimate(int64_t total_params, int64_t largest_layer_params, int gpus_per_node,
                                     int nodes, int stage, bool offload_optimizer, bool offload_params) {
  ZT_CHECK(total_params > 0 && largest_layer_params > 0 && gpus_per_node >= 1 && nodes >= 1,
           "DeepSpeed estimate: total_params ", total_params, ", largest_layer_params ", largest_layer_params,
           ", gpus_per_node ", gpus_per_node, ", nodes ", nodes, ": all must be positive");
  ZT_CHECK(stage >= 0 && stage <= 3, "DeepSpeed estimate: ZeRO stage ", stage, ": must be 0..3");
  ZT_CHECK(!offload_optimizer || stage >= 1, "DeepSpeed estimate: offload_optimizer needs ZeRO stage >= 1");
  ZT_CHECK(!offload_params || (stage == 3 && offload_optimizer),
           "DeepSpeed estimate: offload_param is estimated for stage 3 with offload_optimizer only");
  const double params = static_cast<double>(total_params);
  const double largest = static_cast<double>(largest_layer_params);
  const double gpus_per_node_d = gpus_per_node;
  const int64_t total_gpus = static_cast<int64_t>(nodes) * gpus_per_node;
  const double total_gpus_d = static_cast<double>(total_gpus);
  DeepSpeedEstimate estimate;

  if (stage <= 2) {
    // estimate_zero2_model_states_mem_needs (stage_1_and_2.py):
    //   cpu_offload: gpu_mem = 2 * total_params
    //                cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    //   else:        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
    //                cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    //   18 = 2 grads_16bit + 4 grads_32bit + 4 params_32bit + 8 optimizer states (its comment)
    // Stage 0: the same with nothing partitioned (total_gpus -> 1). Stage 1: the 2-byte fp16
    // gradients stay whole (2 * total_params), the other 16 bytes are partitioned.
    if (offload_optimizer) {
      const int64_t fp16_grads = stage == 1 ? 2 * total_params : 0;
      estimate.gpu_bytes = 2 * total_params + fp16_grads;
      estimate.cpu_bytes = python_int(params * std::max(4.0 * total_gpus_d, 16.0) * kAdditionalBufferFactor);
    } else {
      if (stage == 2)
        estimate.gpu_bytes = 2 * total_params + python_int(18.0 * params / total_gpus_d);
      else if (stage == 1)
        estimate.gpu_bytes = 2 * total_params + 2 * total_params + python_int(16.0 * params / total_gpus_d);
      else
        estimate.gpu_bytes = 2 * total_params + python_int(18.0 * params);
      estimate.cpu_bytes = python_int(params * 4.0 * gpus_per_node_d * kAdditionalBufferFactor);
    }
    estimate.cpu_bytes_without_zero_init = estimate.cpu_bytes;
    estimate.source = stage == 2   ? "DeepSpeed estimate_zero2_model_states_mem_needs"
                      : stage == 1 ? "DeepSpeed's stage-2 accounting with whole fp16 gradients (no stage-1 estimator)"
                                   : "DeepSpeed's stage-2 accounting with nothing partitioned (no stage-0 estimator)";
    return estimate;
  }

  // estimate_zero3_model_states_mem_needs (stage3.py), evaluated in Python's order:
  //   gpus_factor = 1 / num_nodes; largest_layer_memory = 4 * largest_layer_params
  //   offload optimizer + params: gpu = largest_layer_memory
  //     cpu = total * 18 * gpus_factor * abf           (zero_init)
  //           total * max(4 * gpus_per_node, 18 * gpus_factor) * abf   (not zero_init)
  //   offload optimizer only:     gpu = largest_layer_memory + int(2 * total / total_gpus)
  //     cpu = total * 16 * gpus_factor * abf  /  total * max(4 * gpus_per_node, 16 * gpus_factor) * abf
  //   no offload:                 gpu = largest_layer_memory + int(18 * total / total_gpus)
  //     cpu = largest_layer_params * 4 * gpus_per_node * abf  /  total * 4 * gpus_per_node * abf
  const double gpus_factor = 1.0 / static_cast<double>(nodes);
  const int64_t largest_layer_memory = 4 * largest_layer_params;
  if (offload_optimizer) {
    const double bytes_per_param = offload_params ? 18.0 : 16.0;
    estimate.gpu_bytes = largest_layer_memory + (offload_params ? 0 : python_int(2.0 * params / total_gpus_d));
    estimate.cpu_bytes = python_int(params * bytes_per_param * gpus_factor * kAdditionalBufferFactor);
    estimate.cpu_bytes_without_zero_init = python_int(
        params * std::max(4.0 * gpus_per_node_d, bytes_per_param * gpus_factor) * kAdditionalBufferFactor);
  } else {
    estimate.gpu_bytes = largest_layer_memory + python_int(18.0 * params / total_gpus_d);
    estimate.cpu_bytes = python_int(largest * 4.0 * gpus_per_node_d * kAdditionalBufferFactor);
    estimate.cpu_bytes_without_zero_init = python_int(params * 4.0 * gpus_per_node_d * kAdditionalBufferFactor);
  }
  estimate.source = "DeepSpeed estimate_zero3_model_states_mem_needs";
  return estimate;
}

namespace {
// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj": the module
// that owns a parameter directly (what DeepSpeed's model_to_params groups by).
std::string owning_module(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}
}  // namespace

ModelParamCounts count_model_params(const std::vector<ParamSpec>& model_specs,
                                    const std::vector<ParamSpec>& lora_specs) {
  ModelParamCounts counts;
  std::map<std::string, int64_t> per_module;  // module path -> its own parameters
  std::map<int, int64_t> per_block;           // decoder block -> all its parameters
  for (const std::vector<ParamSpec>* specs : {&model_specs, &lora_specs}) {
    for (const ParamSpec& spec : *specs) {
      if (spec.tied()) continue;  // the same tensor as its target, counted once
      const int64_t numel = spec.numel();
      counts.total += numel;
      per_module[owning_module(spec.name)] += numel;
      if (spec.layer >= 0) per_block[spec.layer] += numel;
    }
  }
  counts.trainable = counts.total;
  if (!lora_specs.empty()) {
    counts.trainable = 0;
    for (const ParamSpec& spec : lora_specs) counts.trainable += spec.numel();
  }
  for (const auto& [module, numel] : per_module) counts.largest_layer = std::max(counts.largest_layer, numel);
  counts.gather_unit = counts.largest_layer;  // modules outside the blocks are gathered alone
  for (const auto& [layer, numel] : per_block) counts.gather_unit = std::max(counts.gather_unit, numel);
  return counts;
}

int64_t rule_of_thumb_hidden_size(int64_t total_params) {
  ZT_CHECK(total_params > 0, "rule of thumb: parameter count ", total_params, " must be > 0");
  return std::max<int64_t>(1, std::llround(std::cbrt(128.0 * static_cast<double>(total_params) / 12.0)));
}

int64_t rule_of_thumb_largest_layer(int64_t total_params) {
  return std::min(total_params, 32000 * rule_of_thumb_hidden_size(total_params));
}

int64_t rule_of_thumb_block(int64_t total_params) {
  const int64_t hidden = rule_of_thumb_hidden_size(total_params);
  return std::min(total_params, 12 * hidden * hidden);
}

std::vector<std::vector<int64_t>> rule_of_thumb_shapes(int64_t total_params) {
  const int64_t hidden = rule_of_thumb_hidden_size(total_params);
  const int64_t layers = std::max<int64_t>(1, std::llround(static_cast<double>(hidden) / 128.0));
  const int64_t mlp = std::max<int64_t>(1, std::llround(8.0 * static_cast<double>(hidden) / 3.0));
  std::vector<std::vector<int64_t>> shapes = {{32000, hidden}, {32000, hidden}, {hidden}};
  for (int64_t layer = 0; layer < layers; ++layer) {
    for (int k = 0; k < 4; ++k) shapes.push_back({hidden, hidden});
    shapes.push_back({mlp, hidden});
    shapes.push_back({mlp, hidden});
    shapes.push_back({hidden, mlp});
    shapes.push_back({hidden});
    shapes.push_back({hidden});
  }
  return shapes;
}

int64_t parse_param_count(const std::string& text, const std::string& flag) {
  const std::string example = " (write e.g. 6738415616, 7e9, 6.7B or 125M)";
  size_t used = 0;
  double number = 0.0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    fail(flag, " = '", text, "': not a parameter count", example);
  }
  double multiplier = 1.0;
  const std::string suffix = text.substr(used);
  if (suffix == "k" || suffix == "K") multiplier = 1e3;
  else if (suffix == "m" || suffix == "M") multiplier = 1e6;
  else if (suffix == "b" || suffix == "B" || suffix == "g" || suffix == "G") multiplier = 1e9;
  else if (suffix == "t" || suffix == "T") multiplier = 1e12;
  else ZT_CHECK(suffix.empty(), flag, " = '", text, "': unknown suffix '", suffix, "'", example);
  const double count = number * multiplier;
  ZT_CHECK(std::isfinite(count) && count >= 1.0, flag, " = ", text, ": must be a count >= 1");
  ZT_CHECK(count < 9.0e18, flag, " = ", text, ": too large");
  ZT_CHECK(std::fabs(count - std::round(count)) < 1e-6 * count, flag, " = ", text, ": not a whole number");
  return std::llround(count);
}

}  // namespace zt
