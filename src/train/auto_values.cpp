// "auto" resolution as transformers' HfTrainerDeepSpeedConfig.trainer_config_process does it,
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

}  // namespace

void resolve_deepspeed_choices(TrainConfig& config, const std::function<bool(const std::string&)>& flag_given,
                               std::vector<std::string>& notes) {
  const DeepSpeedKeys& keys = config.deepspeed_keys;
  const std::string& file = config.deepspeed_config_path;
  const auto is_auto = [&](const std::string& key) {
    return std::find(keys.automatic.begin(), keys.automatic.end(), key) != keys.automatic.end();
  };
  const auto say = [&](const std::string& key, const std::string& resolution) {
    notes.push_back(cat(file, ": ", key, ": auto -> ", resolution));
  };
  // One resolution per "auto" key, in the order the JSON was read.
  for (const std::string& key : keys.automatic) {
    if (key == "optimizer.params.lr") {
      if (flag_given("lr")) say(key, cat(config.optimizer.lr, " (--lr)"));
      else say(key, cat(config.optimizer.lr = kHfLearningRate, " (HF default learning_rate)"));
    } else if (key == "optimizer.params.weight_decay") {
      if (flag_given("weight-decay")) say(key, cat(config.optimizer.weight_decay, " (--weight-decay)"));
      else say(key, cat(config.optimizer.weight_decay = 0.0, " (HF default weight_decay)"));
    } else if (key == "optimizer.params.betas") {
      config.optimizer.beta1 = 0.9;
      config.optimizer.beta2 = 0.999;
      say(key, "[0.9, 0.999] (HF default adam_beta1, adam_beta2)");
    } else if (key == "optimizer.params.eps") {
      say(key, cat(config.optimizer.eps = 1e-8, " (HF default adam_epsilon)"));
    } else if (key == "gradient_clipping") {
      if (flag_given("gradient-clipping")) say(key, cat(config.gradient_clipping, " (--gradient-clipping)"));
      else say(key, cat(config.gradient_clipping = kHfMaxGradNorm, " (HF default max_grad_norm)"));
    } else if (key == "train_micro_batch_size_per_gpu") {
      if (flag_given("micro-batch-size")) say(key, cat(config.micro_batch_size, " (--micro-batch-size)"));
      else if (config.train_batch_size > 0) say(key, "derived from train_batch_size at start");
      else say(key, cat(config.micro_batch_size = kHfPerDeviceBatch, " (HF default per_device_train_batch_size)"));
    } else if (key == "gradient_accumulation_steps") {
      if (flag_given("grad-accum")) say(key, cat(config.gradient_accumulation_steps, " (--grad-accum)"));
      else if (config.train_batch_size > 0) say(key, "derived from train_batch_size at start");
      else say(key, cat(config.gradient_accumulation_steps = 1, " (HF default gradient_accumulation_steps)"));
    } else if (key == "train_batch_size") {
      say(key, "micro-batch x gradient accumulation x world size (as HF computes it)");
    } else if (key == "fp16.enabled" || key == "bf16.enabled") {
      say(key, "false (HF default; zerotune has no --fp16/--bf16 flag: set \"enabled\": true in the JSON)");
    } else if (key == "scheduler.params.warmup_max_lr") {
      say(key, cat("the optimizer's lr, ", config.optimizer.lr));
    } else if (key == "scheduler.params.warmup_min_lr") {
      say(key, cat(config.scheduler.warmup_min_lr, " (HF)"));
    } else if (key == "scheduler.params.warmup_num_steps") {
      say(key, cat(config.scheduler.warmup_num_steps, " (HF: max(1, warmup_steps))"));
    } else if (key == "scheduler.params.total_num_steps") {
      say(key, "the run's length in optimizer steps (HF: max_steps)");
    } else {
      say(key, "DeepSpeed's default (HF derives it from the model's hidden_size; it changes speed and memory, not "
               "the result)");
    }
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
