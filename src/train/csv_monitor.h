// DeepSpeed's csv_monitor layout (deepspeed/monitor/csv_monitor.py): in one directory, one file
// per metric, named after the metric's tag with '/' and ' ' turned into '_'
// ("Train/Samples/train_loss" -> Train_Samples_train_loss.csv), a header row "step,<the tag's
// last part>" ("step,train_loss"), then one row "<step>,<value>" per write. Rank 0 writes them
// for the DeepSpeed "csv_monitor" section (train/monitors.h).
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace zt {

// The file name (without the directory) and the header's column name of a tag, as DeepSpeed
// derives them.
std::string csv_monitor_file_name(const std::string& tag);
std::string csv_monitor_column(const std::string& tag);

class CsvMonitor {
 public:
  // Creates `dir` (with its parents); `key` names the config key in errors
  // ("csv_monitor.output_path"). resume_step empty: a new run, and each file starts afresh at
  // its first write; else a resumed run, and each file keeps its rows up to resume_step (the
  // later steps run again and append theirs, as metrics.jsonl does).
  CsvMonitor(const std::string& dir, const std::string& key, std::optional<int64_t> resume_step);

  // One row in the file of each (tag, value); values are written in the shortest form that
  // reads back as the same double.
  void write(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& dir() const { return dir_; }

 private:
  // The first write of this run to `path`: the header, and on resume the rows kept.
  void start_file(const std::string& path, const std::string& tag);

  std::string dir_;
  std::optional<int64_t> resume_step_;
  std::set<std::string> started_;  // the files this run has written to
};

}  // namespace zt
