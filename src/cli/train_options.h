// The options of `zerotune train` (flags, INI file, DeepSpeed JSON) parsed into a TrainConfig:
// shared by the commands that take them, so `selftest` checks the run `train` will do.
#pragma once
#include <boost/program_options.hpp>

#include <initializer_list>
#include <string>
#include <vector>

#include "train/train_config.h"
#include "train/trainer.h"

namespace zt {

struct ParsedTrainOptions {
  TrainConfig config;
  RunOptions run;
  bool help = false;  // --help was given (and printed)
};

// `args` of `zerotune <command>`: train's options plus `extra`; the options in `required` must
// be there. `vm` receives every value (the command reads its own options from it).
ParsedTrainOptions parse_train_options(const std::vector<std::string>& args, const char* command,
                                       const boost::program_options::options_description& extra,
                                       std::initializer_list<const char*> required,
                                       boost::program_options::variables_map& vm);

}  // namespace zt
