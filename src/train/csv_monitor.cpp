// DeepSpeed's csv_monitor files (csv_monitor.h).
#include "train/csv_monitor.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/error.h"
#include "model/safetensors.h"  // write_file_atomic

namespace zt {

namespace {

namespace fs = std::filesystem;

std::string shortest(double value) {
  char text[64];
  const std::to_chars_result result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

// The header and the rows of an existing file whose step is <= last_step. A row whose step
// does not parse (a write cut short by a kill) is dropped with the later ones.
std::string rows_up_to(const std::string& path, const std::string& header, int64_t last_step) {
  std::ifstream in(path);
  std::string kept = header + "\n", line;
  if (!in || !std::getline(in, line)) return kept;  // absent or empty: the header alone
  while (std::getline(in, line)) {
    const size_t comma = line.find(',');
    int64_t step = 0;
    const char* end = line.data() + (comma == std::string::npos ? 0 : comma);
    const std::from_chars_result parsed = std::from_chars(line.data(), end, step);
    if (comma == std::string::npos || parsed.ec != std::errc() || parsed.ptr != end || step > last_step) continue;
    kept += line + "\n";
  }
  return kept;
}

}  // namespace

std::string csv_monitor_file_name(const std::string& tag) {
  std::string name = tag;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

std::string csv_monitor_column(const std::string& tag) {
  const size_t slash = tag.rfind('/');
  return slash == std::string::npos ? tag : tag.substr(slash + 1);
}

CsvMonitor::CsvMonitor(const std::string& dir, const std::string& key, std::optional<int64_t> resume_step)
    : dir_(dir), resume_step_(resume_step) {
  std::error_code error;
  fs::create_directories(dir, error);
  ZT_CHECK(!error, key, ": cannot create the directory ", dir, ": ", error.message());
}

void CsvMonitor::start_file(const std::string& path, const std::string& tag) {
  const std::string header = "step," + csv_monitor_column(tag);
  // A new run starts each file afresh (DeepSpeed would append a second header and the new
  // run's rows after the old run's); a resumed one keeps the rows of the steps it keeps.
  write_file_atomic(path, resume_step_ ? rows_up_to(path, header, *resume_step_) : header + "\n");
  started_.insert(path);
}

void CsvMonitor::write(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [tag, value] : values) {
    const std::string path = (fs::path(dir_) / csv_monitor_file_name(tag)).string();
    if (!started_.count(path)) start_file(path, tag);
    std::ofstream out(path, std::ios::app);
    out << step << ',' << shortest(value) << '\n';
    out.flush();
    ZT_CHECK(out, path, ": write failed (disk full?)");
  }
}

}  // namespace zt
