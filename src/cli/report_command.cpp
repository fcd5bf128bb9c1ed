// `zerotune report OUT`: (re)writes OUT/report.html from OUT/metrics.jsonl and OUT/run.json
// (the page the trainer writes at the end of a run; useful while a job still runs, or after a
// resumed run) and prints the run's summary.
#include <boost/program_options.hpp>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/parse_options.h"
#include "core/error.h"
#include "train/report_html.h"

namespace zt {

int command_report(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description description(
      "usage: zerotune report OUT\nwrite OUT/report.html (loss, eval loss, throughput and memory curves, summary) from "
      "OUT/metrics.jsonl and OUT/run.json\noptions");
  description.add_options()("help,h", "print this help");
  po::variables_map values;
  if (!parse_command_options(args, description, values, "report", "out")) return 0;
  ZT_CHECK(values.count("out"), "no directory given: usage `zerotune report OUT` (see `zerotune report --help`)");
  const std::string out_dir = values["out"].as<std::string>();
  std::error_code error;
  ZT_CHECK(std::filesystem::is_directory(out_dir, error), out_dir,
           ": not a directory; zerotune report reads the --out directory of `zerotune train`");

  if (process_rank() != 0) return 0;  // one writer per job
  const std::string path = write_report(out_dir);
  std::fputs(format_run_summary(summarize_run(read_metrics_history(out_dir + "/metrics.jsonl"))).c_str(), stdout);
  std::printf("report: %s\n", path.c_str());
  return 0;
}

}  // namespace zt
