// OUT/report.html from metrics.jsonl and run.json: summary, configuration, and the curves as
// inline SVG line charts; and the console summary at the end of training.
#include "train/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "train/metrics.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// ---- reading records

// The value of `key` as a number, empty when missing, null (NaN is written as null) or not a number.
std::optional<double> number(const nlohmann::json& record, const char* key) {
  auto found = record.find(key);
  if (found == record.end() || !found->is_number()) return std::nullopt;
  return found->get<double>();
}

// ---- charts

struct ChartSeries {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
};

// The points of `key` against "step" (records without a finite value are left out), scaled.
std::vector<std::pair<double, double>> curve(const std::vector<nlohmann::json>& records, const char* key,
                                             double scale = 1.0) {
  std::vector<std::pair<double, double>> points;
  for (const nlohmann::json& record : records) {
    const std::optional<double> value = number(record, key);
    if (value && std::isfinite(*value)) points.emplace_back(record.at("step").get<double>(), *value * scale);
  }
  return points;
}

// A round tick spacing: 1, 2 or 5 times a power of ten, about range/4.
double tick_spacing(double range) {
  const double rough = range / 4.0;
  const double power = std::pow(10.0, std::floor(std::log10(rough)));
  const double fraction = rough / power;
  const double nice = fraction < 1.5 ? 1.0 : fraction < 3.0 ? 2.0 : fraction < 7.0 ? 5.0 : 10.0;
  return nice * power;
}

struct Axis {
  double low = 0.0, high = 1.0, spacing = 1.0;  // the range widened to whole ticks
};

Axis make_axis(double low, double high) {
  if (!(high > low)) {  // one value: give it some room
    const double pad = low != 0.0 ? std::fabs(low) * 0.1 : 1.0;
    low -= pad;
    high += pad;
  }
  Axis axis;
  axis.spacing = tick_spacing(high - low);
  axis.low = std::floor(low / axis.spacing) * axis.spacing;
  axis.high = std::ceil(high / axis.spacing) * axis.spacing;
  return axis;
}

// A tick label: "0.25", "35.2", "1.2e-05"; whole numbers up to a billion in full ("19000",
// not "1.9e+04": throughput ticks).
std::string number_text(double value) {
  char text[32];
  if (std::fabs(value) < 1e-12) value = 0.0;  // a tick at zero after rounding
  if (std::fabs(value) >= 1e4 && std::fabs(value) < 1e9) std::snprintf(text, sizeof(text), "%.0f", value);
  else std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

constexpr int kWidth = 720, kHeight = 300;
constexpr int kLeft = 80, kRight = 20, kTop = 34, kBottom = 48;
// Longer runs are thinned to every k-th point (the last always kept): a page stays small.
constexpr size_t kMaxPointsPerSeries = 2000;

std::string svg_chart(const Chart& chart) {
  double x_min = INFINITY, x_max = -INFINITY, y_min = INFINITY, y_max = -INFINITY;
  for (const ChartSeries& series : chart.series)
    for (const auto& [x, y] : series.points) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, y);
      y_max = std::max(y_max, y);
    }
  const Axis x_axis = make_axis(x_min, x_max), y_axis = make_axis(y_min, y_max);
  const double plot_width = kWidth - kLeft - kRight, plot_height = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_axis.low) / (x_axis.high - x_axis.low) * plot_width; };
  auto py = [&](double y) { return kTop + (y_axis.high - y) / (y_axis.high - y_axis.low) * plot_height; };

  std::ostringstream svg;
  svg.precision(6);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" role=\"img\" aria-label=\"" << html_escape(chart.title)
      << "\">\n";
  svg << "<text x=\"" << kLeft << "\" y=\"20\" class=\"title\">" << html_escape(chart.title) << "</text>\n";
  // Grid lines and tick labels; the + spacing/2 keeps the last tick despite rounding.
  for (double y = y_axis.low; y <= y_axis.high + y_axis.spacing / 2; y += y_axis.spacing)
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_width << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
        << "\" class=\"grid\"/><text x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">"
        << number_text(y) << "</text>\n";
  for (double x = x_axis.low; x <= x_axis.high + x_axis.spacing / 2; x += x_axis.spacing)
    svg << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << kTop << "\" y2=\"" << kTop + plot_height
        << "\" class=\"grid\"/><text x=\"" << px(x) << "\" y=\"" << kTop + plot_height + 16
        << "\" text-anchor=\"middle\">" << number_text(x) << "</text>\n";
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << plot_width << "\" height=\"" << plot_height
      << "\" class=\"frame\"/>\n";
  svg << "<text x=\"" << kLeft + plot_width / 2 << "\" y=\"" << kHeight - 8 << "\" text-anchor=\"middle\">"
      << html_escape(chart.x_label) << "</text>\n";
  svg << "<text x=\"14\" y=\"" << kTop + plot_height / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
      << kTop + plot_height / 2 << ")\">" << html_escape(chart.y_label) << "</text>\n";

  double legend_x = kLeft + plot_width;
  for (auto series = chart.series.rbegin(); series != chart.series.rend(); ++series) {
    const size_t stride = (series->points.size() + kMaxPointsPerSeries - 1) / kMaxPointsPerSeries;
    svg << "<polyline class=\"series\" stroke=\"" << series->color << "\" points=\"";
    for (size_t i = 0; i < series->points.size(); ++i)
      if (i % std::max<size_t>(stride, 1) == 0 || i + 1 == series->points.size())
        svg << px(series->points[i].first) << ',' << py(series->points[i].second) << ' ';
    svg << "\"/>\n";
    if (series->points.size() <= 60)  // few points (short runs, evaluations): mark each one
      for (const auto& [x, y] : series->points)
        svg << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.5\" fill=\"" << series->color << "\"/>\n";
    // Legend, right-aligned above the plot, in the series' order.
    legend_x -= 8.0 * static_cast<double>(series->name.size()) + 28.0;
    svg << "<rect x=\"" << legend_x << "\" y=\"14\" width=\"12\" height=\"4\" fill=\"" << series->color
        << "\"/><text x=\"" << legend_x + 16 << "\" y=\"20\">" << html_escape(series->name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

// A chart section: the SVG, or a line saying why there is none.
std::string chart_section(const std::string& heading, const Chart& chart, const std::string& empty_note) {
  std::vector<ChartSeries> drawn;
  for (const ChartSeries& series : chart.series)
    if (!series.points.empty()) drawn.push_back(series);
  std::string html = "<h2>" + html_escape(heading) + "</h2>\n";
  if (drawn.empty()) return html + "<p class=\"note\">" + html_escape(empty_note) + "</p>\n";
  Chart shown = chart;
  shown.series = drawn;
  return html + svg_chart(shown);
}

// ---- tables

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

std::string table_row(const std::string& name, const std::string& value) {
  return "<tr><th>" + html_escape(name) + "</th><td>" + html_escape(value) + "</td></tr>\n";
}

// The value at `path` ("a/b") in run.json as text; empty when absent.
std::string run_value(const nlohmann::json& run, const std::string& path) {
  if (!run.is_object()) return "";
  try {
    const nlohmann::json& value = run.at(nlohmann::json::json_pointer("/" + path));
    if (value.is_string()) return value.get<std::string>();
    if (value.is_null()) return "";
    return value.dump();
  } catch (const nlohmann::json::exception&) {
    return "";
  }
}

std::string summary_table(const RunSummary& s) {
  std::string rows;
  rows += table_row("steps", cat(s.steps, s.total_steps > 0 ? cat(" of ", s.total_steps) : "", " (", s.skipped,
                                 " skipped), last step ", s.last_step));
  rows += table_row("training time (sum of steps)", format_duration(s.train_seconds));
  if (s.first_loss) rows += table_row("loss: first / final / min", fixed(*s.first_loss, 4) + " / " +
                                                                        fixed(*s.final_loss, 4) + " / " + fixed(*s.min_loss, 4));
  if (s.final_eval_loss)
    rows += table_row("final eval loss (ppl)", fixed(*s.final_eval_loss, 4) +
                                                   (s.final_eval_ppl ? " (" + fixed(*s.final_eval_ppl, 2) + ")" : ""));
  rows += table_row("samples/s", fixed(s.samples_per_sec, 2));
  rows += table_row("tokens/s", fixed(s.tokens_per_sec, 0));
  rows += table_row("TFLOPS per rank", fixed(s.tflops_per_rank, 3));
  rows += table_row("MFU", s.mfu ? fixed(100.0 * *s.mfu, 1) + "%" : "- (no --peak-tflops)");
  rows += table_row("peak host memory (RSS, rank 0)", format_bytes(s.peak_host_bytes));
  rows += table_row("peak device memory (rank 0)", s.peak_device_bytes ? format_bytes(*s.peak_device_bytes) : "- (CPU backend)");
  return "<table>\n" + rows + "</table>\n";
}

std::string run_table(const nlohmann::json& run) {
  if (!run.is_object()) return "<p class=\"note\">run.json was not found: no configuration to show.</p>\n";
  static const std::pair<const char*, const char*> fields[] = {
      {"model", "model_dir"},
      {"data", "data_dir"},
      {"evaluation data", "eval_data_dir"},
      {"DeepSpeed config", "deepspeed_config_path"},
      {"world size (ranks)", "world_size"},
      {"nodes", "nodes"},
      {"backend", "backend"},
      {"parameters (total)", "parameters/total"},
      {"parameters (trainable)", "parameters/trainable"},
      {"compute dtype", "compute_dtype"},
      {"ZeRO stage", "zero_optimization/stage"},
      {"optimizer offload", "zero_optimization/offload_optimizer/device"},
      {"LoRA rank", "lora/r"},
      {"train batch size", "train_batch_size"},
      {"micro-batch per rank", "train_micro_batch_size_per_gpu"},
      {"gradient accumulation", "gradient_accumulation_steps"},
      {"optimizer", "optimizer/type"},
      {"learning rate", "optimizer/lr"},
      {"scheduler", "scheduler/type"},
      {"seed", "seed"},
      {"zerotune version", "versions/zerotune"},
  };
  std::string rows;
  for (const auto& [name, path] : fields) {
    const std::string value = run_value(run, path);
    if (!value.empty()) rows += table_row(name, value);
  }
  return "<table>\n" + rows + "</table>\n";
}

constexpr const char* kStyle = R"(body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { border: 1px solid #ccc; padding: 3px 10px; text-align: left; font-weight: normal; }
th { background: #f4f4f4; }
svg { display: block; margin-bottom: 1.5em; font-size: 12px; }
svg .title { font-size: 14px; font-weight: bold; }
svg .grid { stroke: #e4e4e4; }
svg .frame { fill: none; stroke: #888; }
svg .series { fill: none; stroke-width: 1.5; }
tr.best td { font-weight: bold; }
.note { color: #666; }
)";

}  // namespace

std::string html_escape(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': escaped += "&amp;"; break;
      case '<': escaped += "&lt;"; break;
      case '>': escaped += "&gt;"; break;
      case '"': escaped += "&quot;"; break;
      case '\'': escaped += "&#39;"; break;
      default: escaped += c;
    }
  }
  return escaped;
}

MetricsHistory read_metrics_history(const std::string& metrics_path) {
  std::ifstream in(metrics_path, std::ios::binary);
  ZT_CHECK(in, metrics_path, ": cannot open (the metrics of a `zerotune train` run)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::map<int64_t, nlohmann::json> steps, evals;  // by step: the later record replaces the earlier
  size_t begin = 0;
  int64_t line_number = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    const bool terminated = end != std::string::npos;
    const std::string line = text.substr(begin, terminated ? end - begin : std::string::npos);
    begin = terminated ? end + 1 : text.size();
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() && !terminated) break;  // cut off by a kill mid-write
    ZT_CHECK(!record.is_discarded(), metrics_path, ":", line_number, ": not a JSON object");
    ZT_CHECK(record.is_object() && record.contains("step") && record["step"].is_number_integer(), metrics_path, ":",
             line_number, ": a metrics record needs an integer \"step\"");
    const int64_t step = record["step"].get<int64_t>();
    if (record.contains("eval_loss")) evals[step] = std::move(record);
    else if (record.contains("loss")) steps[step] = std::move(record);
    else fail(metrics_path, ":", line_number, ": a record with neither \"loss\" nor \"eval_loss\"");
  }
  MetricsHistory history;
  for (auto& [step, record] : steps) history.steps.push_back(std::move(record));
  for (auto& [step, record] : evals) history.evals.push_back(std::move(record));
  return history;
}

RunSummary summarize_run(const MetricsHistory& history) {
  RunSummary s;
  double samples = 0.0, tokens = 0.0, flops_time = 0.0, mfu_time = 0.0;
  bool every_step_has_mfu = !history.steps.empty();
  for (const nlohmann::json& record : history.steps) {
    ++s.steps;
    s.last_step = record.at("step").get<int64_t>();
    s.total_steps = static_cast<int64_t>(number(record, "total_steps").value_or(static_cast<double>(s.total_steps)));
    s.skipped = static_cast<int64_t>(number(record, "skipped").value_or(static_cast<double>(s.skipped)));
    const std::optional<double> loss = number(record, "loss");
    if (loss && std::isfinite(*loss)) {
      if (!s.first_loss) s.first_loss = s.min_loss = *loss;
      s.final_loss = *loss;
      s.min_loss = std::min(*s.min_loss, *loss);
    }
    const double seconds = number(record, "step_time").value_or(0.0);
    s.train_seconds += seconds;
    samples += number(record, "samples").value_or(0.0);
    tokens += number(record, "tokens").value_or(0.0);
    flops_time += number(record, "tflops_per_rank").value_or(0.0) * seconds;
    const std::optional<double> mfu = number(record, "mfu");
    if (mfu) mfu_time += *mfu * seconds;
    else every_step_has_mfu = false;
    const double host = std::max(number(record, "mem_host_peak").value_or(0.0), number(record, "mem_host_rss").value_or(0.0));
    s.peak_host_bytes = std::max(s.peak_host_bytes, static_cast<int64_t>(host));
    if (const std::optional<double> device = number(record, "mem_device_peak"))
      s.peak_device_bytes = std::max(s.peak_device_bytes.value_or(0), static_cast<int64_t>(*device));
  }
  if (s.train_seconds > 0.0) {
    s.samples_per_sec = samples / s.train_seconds;
    s.tokens_per_sec = tokens / s.train_seconds;
    s.tflops_per_rank = flops_time / s.train_seconds;
    if (every_step_has_mfu) s.mfu = mfu_time / s.train_seconds;
  }
  if (!history.evals.empty()) {
    s.final_eval_loss = number(history.evals.back(), "eval_loss");
    s.final_eval_ppl = number(history.evals.back(), "eval_ppl");
  }
  return s;
}

std::string format_run_summary(const RunSummary& s) {
  std::string text = "summary:\n";
  text += cat("  steps        ", s.steps, s.total_steps > 0 ? cat(" of ", s.total_steps) : "", " (", s.skipped,
              " skipped) in ", format_duration(s.train_seconds), "\n");
  if (s.first_loss)
    text += cat("  loss         ", fixed(*s.first_loss, 4), " -> ", fixed(*s.final_loss, 4), " (min ",
                fixed(*s.min_loss, 4), ")\n");
  if (s.final_eval_loss)
    text += cat("  eval loss    ", fixed(*s.final_eval_loss, 4),
                s.final_eval_ppl ? " (ppl " + fixed(*s.final_eval_ppl, 2) + ")" : "", "\n");
  text += cat("  throughput   ", fixed(s.samples_per_sec, 2), " samples/s, ", fixed(s.tokens_per_sec, 0), " tokens/s, ",
              fixed(s.tflops_per_rank, 3), " TFLOPS/rank, MFU ", s.mfu ? fixed(100.0 * *s.mfu, 1) + "%" : "-", "\n");
  text += cat("  peak memory  host ", format_bytes(s.peak_host_bytes), ", device ",
              s.peak_device_bytes ? format_bytes(*s.peak_device_bytes) : "-", "\n");
  return text;
}

std::string render_report_html(const MetricsHistory& history, const nlohmann::json& run, const std::string& title) {
  constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                     html_escape(title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n";
  html += "<h1>" + html_escape(title) + "</h1>\n";
  html += "<h2>Summary</h2>\n" + summary_table(summarize_run(history));
  html += "<h2>Run</h2>\n" + run_table(run);
  html += chart_section("Training loss", {"loss per optimizer step", "step", "loss", {{"loss", "#1f77b4", curve(history.steps, "loss")}}},
                        "No training steps were recorded.");
  html += chart_section("Evaluation loss",
                        {"eval loss", "step", "eval loss", {{"eval loss", "#d62728", curve(history.evals, "eval_loss")}}},
                        "No evaluation in this run (zerotune train --eval-data DIR).");
  html += chart_section("Throughput",
                        {"tokens per second (all ranks)", "step", "tokens/s",
                         {{"tokens/s", "#2ca02c", curve(history.steps, "tokens_per_sec")}}},
                        "No training steps were recorded.");
  html += chart_section("Memory",
                        {"memory of rank 0", "step", "MiB",
                         {{"host RSS", "#9467bd", curve(history.steps, "mem_host_rss", kMiB)},
                          {"host peak", "#8c564b", curve(history.steps, "mem_host_peak", kMiB)},
                          {"device", "#ff7f0e", curve(history.steps, "mem_device", kMiB)},
                          {"device peak", "#e377c2", curve(history.steps, "mem_device_peak", kMiB)}}},
                        "No memory figures were recorded.");
  html += "</body>\n</html>\n";
  return html;
}

std::string render_autotune_html(const nlohmann::json& results, const std::string& title) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                     html_escape(title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n";
  html += "<h1>" + html_escape(title) + "</h1>\n";
  const std::string optimal = results.value("optimal", std::string());
  std::string rows;
  rows += table_row("model", results.value("model", std::string()));
  rows += table_row("ranks", cat(results.value("world_size", 0)));
  rows += table_row("tokens per sample", cat(results.value("seq_len", int64_t{0})));
  rows += table_row("budget per rank", results.contains("budget_bytes") && results["budget_bytes"].is_number()
                                           ? format_bytes(results["budget_bytes"].get<int64_t>())
                                           : std::string("none"));
  rows += table_row("fastest", optimal);
  html += "<h2>Autotuning</h2>\n<table>\n" + rows + "</table>\n";
  html += "<h2>Experiments</h2>\n<table>\n<tr><th>experiment</th><th>ZeRO stage</th><th>offload optimizer</th>"
          "<th>offload param</th><th>activation checkpointing</th><th>micro-batch</th><th>memory predicted</th>"
          "<th>memory measured</th><th>samples/s</th><th>TFLOPS per rank</th></tr>\n";
  // One line per setting: samples/s over the micro-batches it ran.
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::vector<ChartSeries> series;
  for (const nlohmann::json& experiment : results.value("experiments", nlohmann::json::array())) {
    const std::string name = experiment.value("name", std::string());
    const bool measured = experiment.contains("samples_per_sec");
    const std::string status = experiment.value("pruned", false) ? "over budget" : measured ? "" : "failed";
    const auto cell = [](const std::string& text) { return "<td>" + html_escape(text) + "</td>"; };
    html += std::string(name == optimal ? "<tr class=\"best\">" : "<tr>") + cell(name + (name == optimal ? " (fastest)" : "")) +
            cell(cat(experiment.value("zero_stage", 0))) + cell(experiment.value("offload_optimizer", std::string())) +
            cell(experiment.value("offload_param", std::string())) +
            cell(experiment.value("activation_checkpointing", false) ? "yes" : "no") +
            cell(cat(experiment.value("train_micro_batch_size_per_gpu", int64_t{0}))) +
            cell(format_bytes(experiment.value("memory_predicted_bytes", int64_t{0}))) +
            cell(measured ? format_bytes(experiment.value("memory_measured_bytes", int64_t{0})) : status) +
            cell(measured ? fixed(experiment["samples_per_sec"].get<double>(), 2) : "-") +
            cell(measured ? fixed(experiment.value("tflops_per_rank", 0.0), 4) : "-") + "</tr>\n";
    if (!measured) continue;
    const std::string setting = name.substr(0, name.rfind("_tmbspg"));
    auto found = std::find_if(series.begin(), series.end(), [&](const ChartSeries& s) { return s.name == setting; });
    if (found == series.end()) {
      series.push_back({setting, kColors[series.size() % std::size(kColors)], {}});
      found = std::prev(series.end());
    }
    found->points.emplace_back(experiment.value("train_micro_batch_size_per_gpu", 0.0),
                               experiment["samples_per_sec"].get<double>());
  }
  html += "</table>\n";
  html += chart_section("Throughput by setting",
                        {"samples per second (all ranks) against the micro-batch", "train_micro_batch_size_per_gpu",
                         "samples/s", series},
                        "No experiment ran.");
  html += "</body>\n</html>\n";
  return html;
}

namespace {

// OUT_DIR/report.html replaced whole: written beside it, then renamed over it (a reader never
// sees half a report). Returns its path.
std::string replace_report(const fs::path& dir, const std::string& html) {
  const fs::path target = dir / "report.html", temporary = dir / "report.html.tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    ZT_CHECK(out, temporary.string(), ": cannot open for writing");
    out << html;
    out.flush();
    ZT_CHECK(out, temporary.string(), ": write failed (disk full?)");
  }
  std::error_code error;
  fs::rename(temporary, target, error);
  ZT_CHECK(!error, target.string(), ": cannot rename ", temporary.string(), " to it: ", error.message());
  return target.string();
}

}  // namespace

std::string write_autotune_report(const std::string& out_dir, const nlohmann::json& results) {
  return replace_report(fs::path(out_dir), render_autotune_html(results, "zerotune autotune: " + out_dir));
}

std::string write_report(const std::string& out_dir) {
  const fs::path dir(out_dir);
  const MetricsHistory history = read_metrics_history((dir / "metrics.jsonl").string());
  nlohmann::json run;  // null when there is no run.json
  const fs::path run_path = dir / "run.json";
  if (fs::exists(run_path)) {
    std::ifstream in(run_path);
    ZT_CHECK(in, run_path.string(), ": cannot open");
    run = nlohmann::json::parse(in, nullptr, false);
    ZT_CHECK(!run.is_discarded(), run_path.string(), ": not valid JSON");
  }
  return replace_report(dir, render_report_html(history, run, "zerotune report: " + out_dir));
}

}  // namespace zt
