// DeepSpeed's tensorboard and csv_monitor monitors for rank 0's metrics (monitors.h).
#include "train/monitors.h"

#include "core/error.h"

namespace zt {

namespace {

// Appends (tag, record[key]) when the record has a number there (mem_device is null on the CPU).
void add(std::vector<std::pair<std::string, double>>& values, const std::string& tag, const nlohmann::json& record,
         const char* key) {
  const auto it = record.find(key);
  if (it != record.end() && it->is_number()) values.emplace_back(tag, it->get<double>());
}

}  // namespace

bool Monitors::wanted(const TrainConfig& config) { return config.tensorboard.enabled || config.csv_monitor.enabled; }

Monitors::Monitors(const TrainConfig& config, const std::optional<Resume>& resume, bool loss_scaled)
    : train_batch_size_(config.train_batch_size), loss_scaled_(loss_scaled) {
  std::optional<int64_t> resume_samples;  // the x axis of the checkpoint's step
  if (resume) resume_samples = resume->step * train_batch_size_;
  if (config.tensorboard.enabled) {
    const std::string dir = config.tensorboard.directory();
    tensorboard_.emplace(dir, "tensorboard.output_path");
    // TensorBoard drops what earlier files hold from the START's step on: a resumed run keeps
    // the steps up to its checkpoint (logged before it was saved), a new run keeps nothing, as
    // the CSV files and metrics.jsonl do.
    if (resume) tensorboard_->write_session_start(*resume_samples + 1, resume->checkpoint);
    else tensorboard_->write_session_start(0, "");
    lines_.push_back(cat("tensorboard: event file ", tensorboard_->path(), " (view: tensorboard --logdir ", dir, ")"));
  }
  if (config.csv_monitor.enabled) {
    csv_.emplace(config.csv_monitor.directory(), "csv_monitor.output_path", resume_samples);
    lines_.push_back(cat("csv_monitor: one CSV per metric in ", csv_->dir(), " (DeepSpeed's layout)"));
  }
}

void Monitors::write_step(const nlohmann::json& record) {
  Scalars values;
  add(values, "Train/Samples/train_loss", record, "loss");
  add(values, "Train/Samples/lr", record, "lr");
  add(values, "Train/Samples/grad_norm", record, "grad_norm");
  if (loss_scaled_) add(values, "Train/Samples/loss_scale", record, "loss_scale");
  add(values, "Train/Samples/samples_per_sec", record, "samples_per_sec");
  add(values, "Train/Samples/tokens_per_sec", record, "tokens_per_sec");
  add(values, "Train/Samples/step_time", record, "step_time");
  add(values, "Train/Samples/mem_device", record, "mem_device");
  add(values, "Train/Samples/mem_device_peak", record, "mem_device_peak");
  add(values, "Train/Samples/mem_host_rss", record, "mem_host_rss");
  add(values, "Train/Samples/mem_host_peak", record, "mem_host_peak");
  // The objective's own figures (DPO's rewards/chosen, logps/rejected, ...: the names with a
  // slash, as TRL logs them) under the same prefix.
  for (const auto& [key, value] : record.items())
    if (key.find('/') != std::string::npos) add(values, "Train/Samples/" + key, record, key.c_str());
  write(record.at("step").get<int64_t>(), values);
}

void Monitors::write_eval(const nlohmann::json& record) {
  Scalars values;
  add(values, "Eval/Samples/eval_loss", record, "eval_loss");
  add(values, "Eval/Samples/eval_ppl", record, "eval_ppl");
  // The objective's other evaluation figures (the reward model's eval_reward_accuracy, DPO's
  // eval_rewards/margins, ...); not the counts (eval_samples, eval_tokens, eval_pairs: integers).
  for (const auto& [key, value] : record.items())
    if (key.starts_with("eval_") && key != "eval_loss" && key != "eval_ppl" && value.is_number_float())
      add(values, "Eval/Samples/" + key, record, key.c_str());
  write(record.at("step").get<int64_t>(), values);
}

void Monitors::write(int64_t step, const Scalars& values) {
  const int64_t samples = step * train_batch_size_;  // DeepSpeed's x axis: global_samples
  if (tensorboard_) tensorboard_->write_scalars(samples, values);
  if (csv_) csv_->write(samples, values);
}

}  // namespace zt
