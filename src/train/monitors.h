// DeepSpeed's monitors: the "tensorboard" and "csv_monitor" sections of the DeepSpeed JSON
// (TrainConfig::tensorboard, csv_monitor). Rank 0 writes each metrics.jsonl record to them as
// well, under DeepSpeed's tags and x axis, so dashboards made for DeepSpeed runs read ours:
//   Train/Samples/train_loss, lr, grad_norm, loss_scale (fp16 only, as DeepSpeed),
//   samples_per_sec, tokens_per_sec, step_time (seconds), mem_device and mem_device_peak (GPU
//   only), mem_host_rss, mem_host_peak (bytes) after every step;
//   Eval/Samples/eval_loss and eval_ppl after every evaluation;
// each at the samples consumed so far (step x train_batch_size: DeepSpeed's global_samples).
// The values are metrics.jsonl's (TensorBoard stores them as float32).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/csv_monitor.h"
#include "train/tensorboard_writer.h"
#include "train/train_config.h"

namespace zt {

class Monitors {
 public:
  // What a resumed run continues: the checkpoint's step and directory.
  struct Resume {
    int64_t step = 0;
    std::string checkpoint;
  };

  // Opens the monitors `config` enables. resume: set when resuming; then the CSV files drop
  // their rows after its step, and TensorBoard the earlier event files' steps after it (the new
  // file starts with a SessionLog START there). A new run starts the CSV files it writes afresh
  // and TensorBoard's view of the directory (a START at step 0). loss_scaled: fp16's loss
  // scaler is on.
  Monitors(const TrainConfig& config, const std::optional<Resume>& resume, bool loss_scaled);

  // Whether `config` enables any monitor.
  static bool wanted(const TrainConfig& config);

  // One line per monitor for the log: what it writes and where.
  const std::vector<std::string>& describe() const { return lines_; }

  void write_step(const nlohmann::json& record);  // a metrics.jsonl step record
  void write_eval(const nlohmann::json& record);  // a metrics.jsonl evaluation record

 private:
  using Scalars = std::vector<std::pair<std::string, double>>;
  void write(int64_t step, const Scalars& values);

  int64_t train_batch_size_;
  bool loss_scaled_;
  std::optional<TensorBoardWriter> tensorboard_;
  std::optional<CsvMonitor> csv_;
  std::vector<std::string> lines_;
};

}  // namespace zt
