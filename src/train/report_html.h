// The end-of-run report: OUT/report.html, one self-contained page (inline SVG and CSS, no
// scripts, nothing fetched from the network) with a summary table, the run's configuration
// and the loss, eval loss, throughput and memory curves, made from OUT/metrics.jsonl and
// OUT/run.json; and the console summary printed at the end of training. `zerotune report OUT`
// and the trainer (at the end of a run) both call write_report.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

// metrics.jsonl split into its two kinds of records, each by step ascending. A resumed run
// appends the steps it replays after the checkpoint again: for every step the record written
// last is kept.
struct MetricsHistory {
  std::vector<nlohmann::json> steps;  // training records (they have "loss")
  std::vector<nlohmann::json> evals;  // evaluation records (they have "eval_loss")
};
// Errors name the file and line of a record that is not a JSON object with a "step". A last
// line without its newline that does not parse is left out (the job was killed mid-write).
MetricsHistory read_metrics_history(const std::string& metrics_path);

struct RunSummary {
  int64_t steps = 0;        // distinct optimizer steps recorded
  int64_t last_step = 0;
  int64_t total_steps = 0;  // planned (0 when the records do not say)
  int64_t skipped = 0;
  std::optional<double> first_loss, final_loss, min_loss;  // over finite losses
  std::optional<double> final_eval_loss, final_eval_ppl;
  double train_seconds = 0.0;  // sum of step times
  double samples_per_sec = 0.0, tokens_per_sec = 0.0, tflops_per_rank = 0.0;  // time-weighted
  std::optional<double> mfu;   // time-weighted; empty unless every step has one
  int64_t peak_host_bytes = 0;
  std::optional<int64_t> peak_device_bytes;
};
RunSummary summarize_run(const MetricsHistory& history);

// The summary rank 0 prints at the end of training (several lines, each ending in '\n').
std::string format_run_summary(const RunSummary& summary);

// The whole page; `run` is run.json's content (null when there is none), `title` names the run.
std::string render_report_html(const MetricsHistory& history, const nlohmann::json& run, const std::string& title);

// Reads OUT/metrics.jsonl and OUT/run.json (optional), writes OUT/report.html (through a
// temporary file and a rename, so a reader never sees half a page) and returns its path.
std::string write_report(const std::string& out_dir);

// `zerotune autotune`'s page: OUT/report.html with its experiments (setting, memory predicted /
// measured, samples/s, TFLOPS; the fastest marked) and samples/s against the micro-batch, one
// line per ZeRO stage x offload x checkpointing setting, from `results`
// (OUT/autotuning_results/results.json). Returns its path.
std::string render_autotune_html(const nlohmann::json& results, const std::string& title);
std::string write_autotune_report(const std::string& out_dir, const nlohmann::json& results);

// & < > " ' as HTML entities: for text and attribute values.
std::string html_escape(std::string_view text);

}  // namespace zt
