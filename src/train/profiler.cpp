// The --profile-step table and JSON: per-module FLOPs and time, TFLOPS and share of the step.
#include "train/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace zt {

namespace {

// The part of the step no row measured; rounding can make it slightly negative: then 0.
double unmeasured_seconds(const ProfileTable& table) {
  return std::max(0.0, table.step_seconds - table.total_seconds());
}

double share_of_step(const ProfileTable& table, double seconds) {
  return table.step_seconds > 0.0 ? seconds / table.step_seconds : 0.0;
}

std::string table_row(const std::string& name, size_t name_width, const std::string& flops, double seconds,
                      const std::string& tflops, double share) {
  char line[256];
  std::snprintf(line, sizeof(line), "%-*s %10s %12.3f %9s %6.1f%%\n", static_cast<int>(name_width), name.c_str(),
                flops.c_str(), seconds * 1e3, tflops.c_str(), 100.0 * share);
  return line;
}

std::string tflops_text(double flops, double seconds) {
  if (seconds <= 0.0 || flops <= 0.0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", flops / seconds / 1e12);
  return text;
}

}  // namespace

void ProfileTable::add(const std::string& module, double flops, double seconds) {
  auto row = std::find_if(rows.begin(), rows.end(), [&](const ProfileRow& r) { return r.module == module; });
  if (row == rows.end()) {
    rows.push_back({module, 0.0, 0.0});
    row = rows.end() - 1;
  }
  row->flops += flops;
  row->seconds += seconds;
}

double ProfileTable::total_flops() const {
  double sum = 0.0;
  for (const ProfileRow& row : rows) sum += row.flops;
  return sum;
}

double ProfileTable::total_seconds() const {
  double sum = 0.0;
  for (const ProfileRow& row : rows) sum += row.seconds;
  return sum;
}

std::string format_flops(double flops) {
  static const char* const prefixes[] = {"", " K", " M", " G", " T", " P", " E"};
  int index = 0;
  double value = flops;
  while (std::fabs(value) >= 1000.0 && index < 6) {
    value /= 1000.0;
    ++index;
  }
  char text[32];
  if (index == 0) std::snprintf(text, sizeof(text), "%.0f", value);
  else std::snprintf(text, sizeof(text), "%.2f%s", value, prefixes[index]);
  return text;
}

std::string format_profile_table(const ProfileTable& table) {
  const std::string other_name = "other (unmeasured)";
  size_t name_width = std::max<size_t>(other_name.size(), 6);
  for (const ProfileRow& row : table.rows) name_width = std::max(name_width, row.module.size());

  char header[256];
  std::snprintf(header, sizeof(header), "profile of step %lld (rank %d): %.3f s, %s FLOPs, %s TFLOPS\n",
                static_cast<long long>(table.step), table.rank, table.step_seconds,
                format_flops(table.total_flops()).c_str(), tflops_text(table.total_flops(), table.step_seconds).c_str());
  std::string text = header;
  char columns[256];
  std::snprintf(columns, sizeof(columns), "%-*s %10s %12s %9s %7s\n", static_cast<int>(name_width), "module", "FLOPs",
                "time (ms)", "TFLOPS", "share");
  text += columns;
  for (const ProfileRow& row : table.rows)
    text += table_row(row.module, name_width, format_flops(row.flops), row.seconds, tflops_text(row.flops, row.seconds),
                      share_of_step(table, row.seconds));
  const double other = unmeasured_seconds(table);
  if (other > 0.0) text += table_row(other_name, name_width, "-", other, "-", share_of_step(table, other));
  // The total is the step's wall time: overlapped rows (communication behind backward) can
  // sum to more than the step.
  text += table_row("total (step)", name_width, format_flops(table.total_flops()), table.step_seconds,
                    tflops_text(table.total_flops(), table.step_seconds), table.step_seconds > 0.0 ? 1.0 : 0.0);
  return text;
}

nlohmann::json profile_json(const ProfileTable& table) {
  nlohmann::json modules = nlohmann::json::array();
  for (const ProfileRow& row : table.rows) {
    nlohmann::json entry = {{"module", row.module},
                            {"flops", row.flops},
                            {"seconds", row.seconds},
                            {"tflops", nullptr},
                            {"share", share_of_step(table, row.seconds)}};
    if (row.seconds > 0.0) entry["tflops"] = row.flops / row.seconds / 1e12;
    modules.push_back(entry);
  }
  nlohmann::json record = {{"step", table.step},
                           {"rank", table.rank},
                           {"step_seconds", table.step_seconds},
                           {"total_flops", table.total_flops()},
                           {"tflops", nullptr},
                           {"modules", modules},
                           {"other_seconds", unmeasured_seconds(table)}};
  if (table.step_seconds > 0.0) record["tflops"] = table.total_flops() / table.step_seconds / 1e12;
  return record;
}

}  // namespace zt
