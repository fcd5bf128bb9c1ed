// Parsing a subcommand's options with Boost.ProgramOptions the same way everywhere: --help
// prints the options, a bad option is a zt::Error that points to `zerotune <command> --help`.
#pragma once
#include <boost/program_options.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"

namespace zt {

// Returns false when --help was asked for (the options were printed; exit 0).
inline bool parse_command_options(const std::vector<std::string>& args,
                                  const boost::program_options::options_description& description,
                                  boost::program_options::variables_map& values, const char* command) {
  namespace po = boost::program_options;
  try {
    po::store(po::command_line_parser(args).options(description).run(), values);
    if (values.count("help")) {
      std::cout << description << "\n";
      return false;
    }
    po::notify(values);
  } catch (const po::error& error) {
    fail(error.what(), " (see `zerotune ", command, " --help`)");
  }
  return true;
}

}  // namespace zt
