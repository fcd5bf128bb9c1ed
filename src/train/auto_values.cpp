// "auto" resolution as transformers' HfTrainerDeepSpeedConfig does it (trainer_config_process
// fills most keys from TrainingArguments with fill_match, trainer_config_finalize the scheduler's
// steps and three ZeRO sizes from hidden_size), --bf16/--fp16 as TrainingArguments' bf16/fp16,
// and the notes about flags that override the JSON (auto_values.h).
#include "train/auto_values.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "train/ds_config.h"

namespace zt {

namespace {

using nlohmann::json;

// The HF Trainer's TrainingArguments defaults that "auto" takes when no flag sets the value.
constexpr double kHfLearningRate = 5e-5;
constexpr double kHfMaxGradNorm = 1.0;
constexpr int64_t kHfPerDeviceBatch = 8;

// A flag and the JSON key it overrides, with the value the run uses.
struct Override {
  const char* flag;
  const char* key;
  std::function<json(const TrainConfig&)> value;
};

const std::vector<Override>& overrides() {
  static const std::vector<Override> table = {
      {"micro-batch-size", "train_micro_batch_size_per_gpu", [](const TrainConfig& c) { return json(c.micro_batch_size); }},
      {"grad-accum", "gradient_accumulation_steps", [](const TrainConfig& c) { return json(c.gradient_accumulation_steps); }},
      {"lr", "optimizer.params.lr", [](const TrainConfig& c) { return json(c.optimizer.lr); }},
      {"weight-decay", "optimizer.params.weight_decay", [](const TrainConfig& c) { return json(c.optimizer.weight_decay); }},
      {"gradient-clipping", "gradient_clipping", [](const TrainConfig& c) { return json(c.gradient_clipping); }},
      {"zero-stage", "zero_optimization.stage", [](const TrainConfig& c) { return json(c.zero.stage); }},
      {"offload-optimizer", "zero_optimization.offload_optimizer.device",
       [](const TrainConfig& c) { return json(c.zero.offload_optimizer_device); }},
      {"grad-accum-dtype", "data_types.grad_accum_dtype", [](const TrainConfig& c) { return json(dtype_name(c.grad_accum_dtype)); }},
  };
  return table;
}

using FlagGiven = std::function<bool(const std::string&)>;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Batch sizes and clipping: HF fills them from TrainingArguments (fill_match).
std::optional<std::string> batch_resolution(const std::string& key, TrainConfig& config, const FlagGiven& flag_given) {
  if (key == "gradient_clipping") {
    if (flag_given("gradient-clipping")) return cat(config.gradient_clipping, " (--gradient-clipping; HF: max_grad_norm)");
    return cat(config.gradient_clipping = kHfMaxGradNorm, " (HF fills max_grad_norm, default 1.0)");
  }
  if (key == "train_micro_batch_size_per_gpu") {
    if (flag_given("micro-batch-size"))
      return cat(config.micro_batch_size, " (--micro-batch-size; HF: per_device_train_batch_size)");
    if (config.train_batch_size > 0) return std::string("derived from train_batch_size at start");
    return cat(config.micro_batch_size = kHfPerDeviceBatch, " (HF fills per_device_train_batch_size, default 8)");
  }
  if (key == "gradient_accumulation_steps") {
    if (flag_given("grad-accum")) return cat(config.gradient_accumulation_steps, " (--grad-accum; HF: gradient_accumulation_steps)");
    if (config.train_batch_size > 0) return std::string("derived from train_batch_size at start");
    return cat(config.gradient_accumulation_steps = 1, " (HF fills gradient_accumulation_steps, default 1)");
  }
  if (key == "train_batch_size")
    return std::string("micro-batch x gradient accumulation x world size (HF fills that product, as DeepSpeed computes it)");
  return std::nullopt;
}

// The optimizer's parameters: HF fills them from TrainingArguments (fill_match).
std::optional<std::string> optimizer_resolution(const std::string& key, TrainConfig& config, const FlagGiven& flag_given) {
  if (key == "optimizer.params.lr") {
    if (flag_given("lr")) return cat(config.optimizer.lr, " (--lr; HF: learning_rate)");
    return cat(config.optimizer.lr = kHfLearningRate, " (HF fills learning_rate, default 5e-5)");
  }
  if (key == "optimizer.params.weight_decay") {
    if (flag_given("weight-decay")) return cat(config.optimizer.weight_decay, " (--weight-decay; HF: weight_decay)");
    return cat(config.optimizer.weight_decay = 0.0, " (HF fills weight_decay, default 0)");
  }
  if (key == "optimizer.params.betas") {
    config.optimizer.beta1 = 0.9;
    config.optimizer.beta2 = 0.999;
    return std::string("[0.9, 0.999] (HF fills adam_beta1, adam_beta2, default 0.9, 0.999)");
  }
  if (key == "optimizer.params.eps") return cat(config.optimizer.eps = 1e-8, " (HF fills adam_epsilon, default 1e-8)");
  return std::nullopt;
}

// The scheduler: HF fills warmup_min_lr with 0 and warmup_max_lr with learning_rate at once,
// total_num_steps and warmup_num_steps once the run's length is known (trainer_config_finalize).
std::optional<std::string> scheduler_resolution(const std::string& key, TrainConfig& config, const FlagGiven& flag_given) {
  SchedulerConfig& schedule = config.scheduler;
  if (key == "scheduler.params.warmup_max_lr")
    return cat("the optimizer's lr, ", config.optimizer.lr, " (HF fills learning_rate, which must equal "
               "optimizer.params.lr there)");
  if (key == "scheduler.params.warmup_min_lr")
    return cat(schedule.warmup_min_lr, " (HF fills 0; DeepSpeed's default is 0 too)");
  if (key == "scheduler.params.warmup_num_steps") {
    // HF fills get_warmup_steps(): warmup_steps, else ceil(warmup_ratio x steps), 0 by default;
    // DeepSpeed's WarmupLR then warms up over max(2, that) steps, as zerotune counts any value below 2.
    if (flag_given("warmup-steps")) {
      schedule.warmup_num_steps = std::max<int64_t>(1, schedule.warmup_steps);
      return cat(schedule.warmup_steps, " (--warmup-steps; HF: warmup_steps), counted as at least 2 as DeepSpeed's "
                 "WarmupLR does");
    }
    schedule.warmup_num_steps = 1;  // stands for HF's 0: both are max(2, n) = 2 in DeepSpeed
    return std::string("0 (HF fills warmup_steps, default 0), which DeepSpeed's WarmupLR raises to max(2, 0) = 2 "
                       "warm-up steps");
  }
  if (key == "scheduler.params.total_num_steps")
    return std::string("the run's length in optimizer steps (HF fills num_training_steps: max_steps, else epochs x "
                       "optimizer steps per epoch)");
  if (key == "scheduler.params.warmup_min_ratio" || key == "scheduler.params.cos_min_ratio")
    return cat(key == "scheduler.params.cos_min_ratio" ? schedule.cos_min_ratio : schedule.warmup_min_ratio,
               ", DeepSpeed's default (HF does not fill this key: DeepSpeed would get the string \"auto\")");
  return std::nullopt;
}

// ZeRO sizes: HF fills three of them from the model's hidden_size (trainer_config_finalize),
// leaves the others "auto" (which DeepSpeed's schema refuses); zerotune keeps DeepSpeed's
// defaults, which change speed and memory, not the result.
std::string zero_resolution(const std::string& key, const TrainConfig& config) {
  const ZeroConfig& zero = config.zero;
  const auto keep = [](int64_t value, const char* hf) { return cat(value, ", DeepSpeed's default (", hf, ")"); };
  if (ends_with(key, "reduce_bucket_size"))
    return keep(zero.reduce_bucket_size, "HF fills hidden_size^2");
  if (ends_with(key, "prefetch_bucket_size"))
    return keep(zero.stage3_prefetch_bucket_size, "HF fills 0.9 x hidden_size^2 under ZeRO-3");
  if (ends_with(key, "param_persistence_threshold"))
    return keep(zero.stage3_param_persistence_threshold, "HF fills 10 x hidden_size under ZeRO-3");
  const char* not_filled = "HF does not fill this key: DeepSpeed would get the string \"auto\"";
  if (ends_with(key, "allgather_bucket_size")) return keep(zero.allgather_bucket_size, not_filled);
  if (ends_with(key, "sub_group_size")) return keep(zero.sub_group_size, not_filled);
  if (ends_with(key, "model_persistence_threshold")) return keep(zero.stage3_model_persistence_threshold, not_filled);
  if (ends_with(key, "max_live_parameters")) return keep(zero.stage3_max_live_parameters, not_filled);
  if (ends_with(key, "max_reuse_distance")) return keep(zero.stage3_max_reuse_distance, not_filled);
  return cat("DeepSpeed's default (", not_filled, ")");
}

// The JSON's explicit "enabled" of a precision section (fp16, bf16 or bfloat16), if it gave one.
std::optional<bool> explicit_enabled(const DeepSpeedKeys& keys, const std::string& section) {
  const auto given = keys.given.find(section + ".enabled");
  if (given == keys.given.end() || !given->second.is_boolean()) return std::nullopt;
  return given->second.get<bool>();
}

bool auto_enabled(const DeepSpeedKeys& keys, const std::string& section) {
  return std::find(keys.automatic.begin(), keys.automatic.end(), section + ".enabled") != keys.automatic.end();
}

// A flag that contradicts the JSON is an error, as HF's fill_match mismatch is.
void check_precision_flag(const TrainConfig& config, const std::string& flag, const std::string& section,
                          const std::string& other_section) {
  const DeepSpeedKeys& keys = config.deepspeed_keys;
  const std::string& file = config.deepspeed_config_path;
  ZT_CHECK(explicit_enabled(keys, section) != std::optional<bool>(false), "--", flag, " contradicts ", file, ": ",
           section, ".enabled is false (set it to \"auto\" to let the flag decide, as HF's TrainingArguments do, "
           "or drop --", flag, ")");
  ZT_CHECK(explicit_enabled(keys, other_section) != std::optional<bool>(true), "--", flag, " contradicts ", file, ": ",
           other_section, ".enabled is true (only one 16-bit precision at a time; set it to \"auto\" or false, or "
           "drop --", flag, ")");
}

}  // namespace

void resolve_precision(TrainConfig& config, bool bf16_flag, bool fp16_flag, std::vector<std::string>& notes) {
  ZT_CHECK(!(bf16_flag && fp16_flag), "--bf16 and --fp16 exclude each other (as in HF's TrainingArguments)");
  const DeepSpeedKeys& keys = config.deepspeed_keys;
  const std::string& file = config.deepspeed_config_path;
  const std::string bf16_section = keys.given.count("bfloat16.enabled") || auto_enabled(keys, "bfloat16") ? "bfloat16"
                                                                                                         : "bf16";
  if (bf16_flag) check_precision_flag(config, "bf16", bf16_section, "fp16");
  if (fp16_flag) check_precision_flag(config, "fp16", "fp16", bf16_section);
  if (bf16_flag) config.compute_dtype = DType::BF16;
  if (fp16_flag) config.compute_dtype = DType::F16;
  // Each "auto" takes the flag's value (HF's fill_match: bf16.enabled = args.bf16, fp16.enabled = args.fp16).
  for (const auto& [section, flag, on] : {std::tuple{bf16_section, "bf16", bf16_flag}, std::tuple{std::string("fp16"), "fp16", fp16_flag}}) {
    if (!auto_enabled(keys, section)) continue;
    notes.push_back(cat(file, ": ", section, ".enabled: auto -> ", on ? "true" : "false",
                        on ? cat(" (--", flag, "; HF fills TrainingArguments.", flag, ")")
                           : cat(" (no --", flag, "; HF fills TrainingArguments.", flag, ", default False)")));
  }
  // Without a flag an explicit "enabled": true rules, as in DeepSpeed (HF would ask for the flag too).
  std::string source = file.empty() ? "no --bf16/--fp16: HF's TrainingArguments default"
                                    : "no --bf16/--fp16 and no \"enabled\": true in the JSON: HF's TrainingArguments default";
  if (bf16_flag || fp16_flag) source = cat("--", bf16_flag ? "bf16" : "fp16");
  else if (config.compute_dtype != DType::F32) source = cat(file, " ", config.compute_dtype == DType::BF16 ? bf16_section : "fp16",
                                                             ".enabled true");
  std::string what = "fp32";
  if (config.compute_dtype == DType::BF16) what = "bf16 (fp32 master weights)";
  if (config.compute_dtype == DType::F16) {
    const LossScalerConfig& scaler = config.loss_scaler;
    what = scaler.loss_scale > 0 ? cat("fp16 (fp32 master weights, static loss scale ", scaler.loss_scale, ")")
                                 : cat("fp16 (fp32 master weights, dynamic loss scale from 2^", scaler.initial_scale_power,
                                       ", hysteresis ", scaler.hysteresis, ", min ", scaler.min_loss_scale, ")");
  }
  notes.insert(notes.begin(), cat("precision: ", what, " (", source, ")"));
}

void resolve_deepspeed_choices(TrainConfig& config, const FlagGiven& flag_given, std::vector<std::string>& notes) {
  const DeepSpeedKeys& keys = config.deepspeed_keys;
  const std::string& file = config.deepspeed_config_path;
  const auto is_auto = [&](const std::string& key) {
    return std::find(keys.automatic.begin(), keys.automatic.end(), key) != keys.automatic.end();
  };
  // One resolution per "auto" key, in the order the JSON was read (precision: resolve_precision).
  for (const std::string& key : keys.automatic) {
    if (ends_with(key, "fp16.enabled") || ends_with(key, "bf16.enabled") || ends_with(key, "bfloat16.enabled")) continue;
    std::optional<std::string> resolution = batch_resolution(key, config, flag_given);
    if (!resolution) resolution = optimizer_resolution(key, config, flag_given);
    if (!resolution) resolution = scheduler_resolution(key, config, flag_given);
    if (!resolution) resolution = zero_resolution(key, config);
    notes.push_back(cat(file, ": ", key, ": auto -> ", *resolution));
  }
  // A flag that changes a value the JSON gave: the command line wins, and says so.
  for (const Override& entry : overrides()) {
    if (!flag_given(entry.flag) || is_auto(entry.key)) continue;
    const auto given = keys.given.find(entry.key);
    if (given == keys.given.end()) continue;
    const json used = entry.value(config);
    if (given->second == used || (given->second.is_number() && used.is_number() &&
                                  given->second.get<double>() == used.get<double>()))
      continue;
    if (given->second.is_string() && used.is_string()) {  // one dtype in two of DeepSpeed's spellings ("bfloat16", "bf16")
      const std::optional<DType> before = parse_deepspeed_dtype(given->second.get<std::string>());
      if (before && before == parse_deepspeed_dtype(used.get<std::string>())) continue;
    }
    notes.push_back(cat(file, ": ", entry.key, " ", given->second.dump(), " overridden by --", entry.flag, " ",
                        used.dump(), " (the command line and --config win over the JSON)"));
  }
}

}  // namespace zt
