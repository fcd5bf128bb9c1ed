// The autotuner's search (autotune.h).
#include "train/autotune.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "train/metrics.h"

namespace zt {

nlohmann::ordered_json AutotuneExperiment::to_json() const {
  nlohmann::ordered_json json = {{"name", name},
                                 {"zero_stage", choice.stage},
                                 {"offload_optimizer", choice.offload_optimizer ? "cpu" : "none"},
                                 {"offload_param", choice.offload_params ? "cpu" : "none"},
                                 {"activation_checkpointing", choice.activation_checkpointing},
                                 {"zeropp", choice.zeropp_ranks_per_node > 0},
                                 {"pipeline_stages", choice.pipeline_stages > 0 ? choice.pipeline_stages : 1},
                                 {"train_micro_batch_size_per_gpu", micro_batch},
                                 {"gradient_accumulation_steps", accumulation},
                                 {"memory_predicted_bytes", predicted_bytes},
                                 {"pruned", pruned},
                                 {"ran", ran}};
  if (!error.empty()) json["error"] = error;
  if (ran && error.empty()) {
    json["samples_per_sec"] = samples_per_sec;
    json["tflops_per_rank"] = tflops_per_rank;
    json["memory_measured_bytes"] = measured_bytes;
  }
  return json;
}

std::vector<AutotuneExperiment> autotune(const AutotuneSearch& search,
                                         const std::function<int64_t(const AutotuneExperiment&)>& predict,
                                         const std::function<void(AutotuneExperiment&)>& run) {
  ZT_CHECK(search.max_micro_batch >= 1, "autotune: the largest micro-batch (", search.max_micro_batch,
           ") must be >= 1");
  std::vector<AutotuneExperiment> experiments;
  for (const ZeroChoice& branch : search.branches) {
    double previous = 0.0;  // the branch's last throughput
    for (int64_t micro_batch = 1; micro_batch <= search.max_micro_batch; micro_batch *= 2) {
      AutotuneExperiment experiment;
      experiment.choice = branch;
      experiment.micro_batch = micro_batch;
      experiment.accumulation = search.accumulation;
      experiment.name = choice_experiment_name(branch, search.accumulation, micro_batch);
      experiment.predicted_bytes = predict(experiment);
      experiment.pruned = search.budget_bytes && experiment.predicted_bytes > *search.budget_bytes;
      if (experiment.pruned) {  // and every larger micro-batch of this branch
        experiments.push_back(experiment);
        break;
      }
      run(experiment);
      experiments.push_back(experiment);
      if (!experiment.error.empty()) break;  // a larger one would fail too
      const double gain = previous > 0.0 ? (experiment.samples_per_sec - previous) / previous : 1.0;
      if (search.fast && gain < kAutotuneMinGain) break;
      previous = experiment.samples_per_sec;
    }
  }
  return experiments;
}

const AutotuneExperiment* fastest_experiment(const std::vector<AutotuneExperiment>& experiments) {
  const AutotuneExperiment* best = nullptr;
  for (const AutotuneExperiment& experiment : experiments)
    if (experiment.ran && experiment.error.empty() && (!best || experiment.samples_per_sec > best->samples_per_sec))
      best = &experiment;
  return best;
}

std::string nothing_fits_message(const std::vector<AutotuneExperiment>& experiments, int64_t budget_bytes) {
  const AutotuneExperiment* smallest = nullptr;
  for (const AutotuneExperiment& experiment : experiments)
    if (!smallest || experiment.predicted_bytes < smallest->predicted_bytes) smallest = &experiment;
  if (!smallest) return "autotune: no setting to try";
  return cat("autotune: no setting fits in ", format_bytes(budget_bytes), " per rank: the smallest need is ",
             format_bytes(smallest->predicted_bytes), " (", smallest->predicted_bytes, " bytes: ",
             choice_text(smallest->choice), ", micro-batch ", smallest->micro_batch,
             "); use more GPUs, LoRA, a shorter max_seq_len, or a machine with more memory");
}

namespace {
std::string pad_right(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string fixed_text(double value, int digits) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}
}  // namespace

std::string format_autotune_table(const std::vector<AutotuneExperiment>& experiments) {
  const AutotuneExperiment* best = fastest_experiment(experiments);
  struct Row {
    std::string mark, name, setting, predicted, measured, samples_per_sec, tflops;
  };
  std::vector<Row> rows = {{"", "experiment", "setting", "predicted", "measured", "samples/s", "TFLOPS"}};
  for (const AutotuneExperiment& experiment : experiments) {
    const bool measured = experiment.ran && experiment.error.empty();
    rows.push_back({&experiment == best ? "*" : "", experiment.name,
                    cat(choice_text(experiment.choice), ", micro-batch ", experiment.micro_batch),
                    format_bytes(experiment.predicted_bytes),
                    measured ? format_bytes(experiment.measured_bytes) : experiment.pruned ? "over budget" : "failed",
                    measured ? fixed_text(experiment.samples_per_sec, 2) : "-",
                    measured ? fixed_text(experiment.tflops_per_rank, 4) : "-"});
  }
  // Columns as wide as their widest cell (a pipeline experiment's name and setting are longer).
  size_t name_width = 0, setting_width = 0;
  for (const Row& row : rows) {
    name_width = std::max(name_width, row.name.size());
    setting_width = std::max(setting_width, row.setting.size());
  }
  std::string text;
  for (const Row& row : rows) {
    char line[160];
    std::snprintf(line, sizeof line, " %12s %12s %12s %10s\n", row.predicted.c_str(), row.measured.c_str(),
                  row.samples_per_sec.c_str(), row.tflops.c_str());
    text += cat(pad_right(row.mark, 2), " ", pad_right(row.name, name_width), " ", pad_right(row.setting, setting_width),
                line);
  }
  if (best) text += cat("* fastest: ", best->name, " (", fixed_text(best->samples_per_sec, 2), " samples/s)\n");
  return text;
}

}  // namespace zt
