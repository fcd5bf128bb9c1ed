// TrainConfig's batch-size resolution (DeepSpeed's rules) and its JSON form for run.json.
#include "train/train_config.h"

#include <filesystem>

#include "core/error.h"

namespace zt {

namespace {

nlohmann::json monitor_json(const MonitorConfig& monitor) {
  return {{"enabled", monitor.enabled}, {"output_path", monitor.output_path}, {"job_name", monitor.job_name}};
}

// Where the batch numbers came from, for messages.
std::string batch_source(const TrainConfig& config) {
  if (config.deepspeed_config_path.empty()) return "batch sizes";
  return cat("batch sizes (", config.deepspeed_config_path, " and flags)");
}

// numerator / denominator when it divides exactly into a positive number, else an error that
// shows the arithmetic: "NUMERATOR_TEXT is not divisible by DENOMINATOR_TEXT".
int64_t exact_quotient(const TrainConfig& config, int64_t numerator, const std::string& numerator_text,
                       int64_t denominator, const std::string& denominator_text) {
  ZT_CHECK(numerator % denominator == 0 && numerator / denominator >= 1, batch_source(config), ": ",
           numerator_text, " is not a positive multiple of ", denominator_text, " = ", denominator);
  return numerator / denominator;
}

}  // namespace

// DeepSpeed (runtime/config.py, _set_batch_related_parameters + _batch_assertion):
//   train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size
// Any two given derive the third; train_batch_size alone: accumulation 1; micro-batch alone:
// accumulation 1. Where DeepSpeed would floor-divide and then fail its assertion, the error here
// shows the arithmetic. Differences: DeepSpeed refuses a config with none of them (or only the
// accumulation); zerotune then takes its default micro-batch of 1.
int TrainConfig::data_parallel_size(int world_size) const {
  if (!pipeline.enabled()) return world_size;
  ZT_CHECK(pipeline.stages <= world_size && world_size % pipeline.stages == 0, "--pipeline-stages ", pipeline.stages,
           " does not divide the ", world_size, " ranks (each stage needs the same number of data-parallel replicas)");
  return static_cast<int>(world_size / pipeline.stages);
}

void TrainConfig::resolve_batch_sizes(int world_size) {
  ZT_CHECK(world_size >= 1, "resolve_batch_sizes: world size ", world_size, " must be >= 1");
  ZT_CHECK(train_batch_size >= 0, batch_source(*this), ": train_batch_size ", train_batch_size, " must be positive");
  ZT_CHECK(micro_batch_size >= 0, batch_source(*this), ": train_micro_batch_size_per_gpu ", micro_batch_size,
           " must be positive");
  ZT_CHECK(gradient_accumulation_steps >= 0, batch_source(*this), ": gradient_accumulation_steps ",
           gradient_accumulation_steps, " must be positive");
  const int64_t world = data_parallel_size(world_size);
  const bool have_total = train_batch_size > 0, have_micro = micro_batch_size > 0,
             have_accum = gradient_accumulation_steps > 0;

  if (have_total && have_micro && have_accum) {
    const int64_t product = micro_batch_size * gradient_accumulation_steps * world;
    ZT_CHECK(train_batch_size == product, batch_source(*this), ": train_batch_size ", train_batch_size,
             " != train_micro_batch_size_per_gpu ", micro_batch_size, " * gradient_accumulation_steps ",
             gradient_accumulation_steps, " * world size ", world, " = ", product);
    return;
  }
  if (have_total && have_micro) {
    gradient_accumulation_steps =
        exact_quotient(*this, train_batch_size, cat("train_batch_size ", train_batch_size), micro_batch_size * world,
                       cat("train_micro_batch_size_per_gpu ", micro_batch_size, " * world size ", world));
  } else if (have_total && have_accum) {
    micro_batch_size = exact_quotient(
        *this, train_batch_size, cat("train_batch_size ", train_batch_size), gradient_accumulation_steps * world,
        cat("gradient_accumulation_steps ", gradient_accumulation_steps, " * world size ", world));
  } else if (have_total) {
    gradient_accumulation_steps = 1;
    micro_batch_size = exact_quotient(*this, train_batch_size, cat("train_batch_size ", train_batch_size), world,
                                      cat("world size ", world, " (with gradient_accumulation_steps 1)"));
  } else {
    if (!have_micro) micro_batch_size = 1;  // zerotune's default micro-batch
    if (!have_accum) gradient_accumulation_steps = 1;
    train_batch_size = micro_batch_size * gradient_accumulation_steps * world;
  }
}

std::string MonitorConfig::directory() const { return (std::filesystem::path(output_path) / job_name).string(); }

// DeepSpeed's zero_optimization as resolved, with ZeRO++'s keys (docs/zero-plus-plus.md).
static nlohmann::json zero_json(const ZeroConfig& zero) {
  return {{"stage", zero.stage},
          {"reduce_bucket_size", zero.reduce_bucket_size},
          {"allgather_bucket_size", zero.allgather_bucket_size},
          {"overlap_comm", zero.overlap_comm},
          {"contiguous_gradients", zero.contiguous_gradients},
          {"reduce_scatter", zero.reduce_scatter},
          {"allgather_partitions", zero.allgather_partitions},
          {"round_robin_gradients", zero.round_robin_gradients},
          {"sub_group_size", zero.sub_group_size},
          {"stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold},
          {"stage3_max_live_parameters", zero.stage3_max_live_parameters},
          {"stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size},
          {"stage3_max_reuse_distance", zero.stage3_max_reuse_distance},
          {"stage3_model_persistence_threshold", zero.stage3_model_persistence_threshold},
          {"stage3_gather_16bit_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save},
          {"offload_optimizer", {{"device", zero.offload_optimizer_device}, {"pin_memory", zero.offload_optimizer_pin_memory}}},
          {"offload_param", {{"device", zero.offload_param_device}, {"pin_memory", zero.offload_param_pin_memory}}},
          {"zero_quantized_weights", zero.zero_quantized_weights},
          {"zero_hpz_partition_size", zero.zero_hpz_partition_size},
          {"zero_quantized_gradients", zero.zero_quantized_gradients},
          {"ranks_per_node", zero.ranks_per_node},
          {"delayed_param_update", zero.delayed_update_after},
          {"update_per_bucket", zero.update_per_bucket}};
}

nlohmann::json TrainConfig::to_json() const {
  const double resolved_warmup_max_lr = scheduler.warmup_max_lr_auto ? optimizer.lr : scheduler.warmup_max_lr;
  return {
      {"train_batch_size", train_batch_size},
      {"train_micro_batch_size_per_gpu", micro_batch_size},
      {"gradient_accumulation_steps", gradient_accumulation_steps},
      {"gradient_clipping", gradient_clipping},
      {"pipeline", {{"stages", pipeline.stages}, {"schedule", pipeline.schedule}, {"chunks", pipeline.chunks},
                    {"partition_method", pipeline.partition_method}}},
      {"steps_per_print", steps_per_print},
      {"compute_dtype", dtype_name(compute_dtype)},
      {"grad_accum_dtype", dtype_name(grad_accum_dtype)},
      {"loss_scaler",
       {{"loss_scale", loss_scaler.loss_scale},
        {"initial_scale_power", loss_scaler.initial_scale_power},
        {"loss_scale_window", loss_scaler.loss_scale_window},
        {"hysteresis", loss_scaler.hysteresis},
        {"min_loss_scale", loss_scaler.min_loss_scale}}},
      {"optimizer",
       {{"type", optimizer.type},
        {"lr", optimizer.lr},
        {"betas", {optimizer.beta1, optimizer.beta2}},
        {"eps", optimizer.eps},
        {"weight_decay", optimizer.weight_decay},
        {"adam_w_mode", optimizer.adam_w_mode},
        {"momentum", optimizer.momentum},
        {"dampening", optimizer.dampening},
        {"nesterov", optimizer.nesterov},
        {"bias_correction", optimizer.bias_correction},
        {"eps_inside_sqrt", optimizer.eps_inside_sqrt},
        {"max_coeff", optimizer.max_coeff},
        {"min_coeff", optimizer.min_coeff},
        {"clip_grad_value", optimizer.clip_grad_value}}},
      {"scheduler",
       {{"type", scheduler.type},
        {"warmup_min_lr", scheduler.warmup_min_lr},
        {"warmup_max_lr", resolved_warmup_max_lr},
        {"warmup_max_lr_is_optimizer_lr", scheduler.warmup_max_lr_auto},
        {"warmup_num_steps", scheduler.warmup_num_steps},
        {"warmup_type", scheduler.warmup_type},
        {"total_num_steps", scheduler.total_num_steps},
        {"warmup_min_ratio", scheduler.warmup_min_ratio},
        {"cos_min_ratio", scheduler.cos_min_ratio},
        {"warmup_steps", scheduler.warmup_steps}}},
      {"zero_optimization", zero_json(zero)},
      {"lora",
       {{"r", lora.r}, {"alpha", lora.alpha}, {"dropout", lora.dropout}, {"targets", lora.targets}, {"rslora", lora.rslora}}},
      {"quantize", quant_config_json(quantize)},
      {"activation_checkpointing", activation_checkpointing},
      {"offload_activations", offload_activations},
      {"model_dir", model_dir},
      {"data_dir", data_dir},
      {"data_split", data_split},
      {"out_dir", out_dir},
      {"deepspeed_config_path", deepspeed_config_path},
      {"tensorboard", monitor_json(tensorboard)},
      {"csv_monitor", monitor_json(csv_monitor)},
      {"seed", seed},
      {"shuffle", shuffle},
      {"epochs", epochs},
      {"max_steps", max_steps},
      {"dump_step0_path", dump_step0_path},
      {"eval_data_dir", eval_data_dir},
      {"eval_split", eval_split},
      {"eval_every", eval_every},
      {"eval_at_start", eval_at_start},
      {"dump_final_path", dump_final_path},
      {"comm_timeout_seconds", comm_timeout_seconds},
      {"group_by_length", group_by_length},
      {"packing", packing},
      {"objective", objective},
      {"dpo_beta", dpo_beta},
      {"dpo_label_smoothing", dpo_label_smoothing},
      {"head_chunk_rows", head_chunk_rows},
      {"save_every", save_every},
      {"save_at_end", save_at_end},
      {"save_hf_at_end", save_hf_at_end},
      {"keep_last", keep_last},
      {"resume", resume},
      {"device", device},
      {"comm", comm},
  };
}

QuantConfig run_quantization(const QuantConfig& requested, const QuantConfig& model, const std::string& model_dir) {
  if (!requested.enabled()) return model;
  ZT_CHECK(!model.enabled() || model == requested, model_dir, " is a bitsandbytes 4-bit checkpoint (quantization_config: ",
           describe(model), "): --quantize ", describe(requested), " cannot re-quantize it differently (drop --quantize)");
  return requested;
}

}  // namespace zt
