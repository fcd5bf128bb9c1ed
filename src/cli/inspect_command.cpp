// `zerotune inspect DIR [--split NAME] [--sample N] [--tokenizer DIR_OR_MODEL] [--json]`:
// reports what DIR holds. It looks at DIR first and dispatches: a data directory (token shards
// <split>-NNNNN.h5 from `zerotune prep`) gets data/inspect_data.h's report; a checkpoint, a
// checkpoints directory or a training run's OUT gets ckpt/inspect_checkpoint.h's; anything else
// is an error naming DIR and what was expected.
#include <boost/program_options.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "ckpt/inspect_checkpoint.h"
#include "cli/commands.h"
#include "cli/parse_options.h"
#include "core/error.h"
#include "data/inspect_data.h"

namespace zt {

int command_inspect(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  std::string dir;
  DataInspectOptions data_options;
  bool as_json = false;
  po::options_description description(
      "usage: zerotune inspect DIR: what a data directory (shards, lengths, attributes, a decoded sample) or a\n"
      "checkpoint / training run (steps, world size, stage, files, checksums) holds\noptions");
  description.add_options()
      ("help,h", "print this help")
      ("split", po::value(&data_options.split), "the split to report (needed when DIR holds several)")
      ("sample", po::value(&data_options.sample_index)->default_value(0), "index of the sample to show with its loss mask")
      ("tokenizer", po::value(&data_options.tokenizer),
       "model directory or tokenizer file (as for prep) to decode the sample (default: show token ids)")
      ("json", po::bool_switch(&as_json), "print the report as JSON");
  po::variables_map values;
  if (!parse_command_options(args, description, values, "inspect", "dir")) return 0;
  if (values.count("dir")) dir = values["dir"].as<std::string>();
  ZT_CHECK(!dir.empty(), "no directory given: usage `zerotune inspect DIR` (see `zerotune inspect --help`)");

  std::error_code error;
  ZT_CHECK(std::filesystem::exists(dir, error), dir, ": no such file or directory");
  ZT_CHECK(std::filesystem::is_directory(dir, error), dir, ": not a directory; zerotune inspect reads a data directory, "
           "a checkpoint or a training run's output directory");
  if (process_rank() != 0) return 0;  // one report per job
  if (holds_checkpoints(dir)) {  // before the shard check: rank-00000.h5 looks like a "rank" split
    const nlohmann::ordered_json report = inspect_checkpoints(dir);
    const std::string text = as_json ? report.dump(2) + "\n" : format_checkpoint_report(report);
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  ZT_CHECK(holds_token_shards(dir), dir, ": holds no token shards (<split>-NNNNN.h5 files written by `zerotune prep`) "
           "and no checkpoint (checkpoints/global_stepN/manifest.json); zerotune inspect reads a data directory, a "
           "checkpoint or a training run's output directory");

  const nlohmann::ordered_json report = inspect_data_dir(dir, data_options);
  // A sample cut inside a multi-byte character decodes to bytes that are not UTF-8: JSON shows U+FFFD.
  const std::string text = as_json ? report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n"
                                   : format_data_report(report);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace zt
