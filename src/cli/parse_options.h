// Parsing a subcommand's options with Boost.ProgramOptions the same way everywhere: --help
// prints the options, a bad option is a zt::Error that points to `zerotune <command> --help`.
#pragma once
#include <boost/program_options.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"

namespace zt {

// Returns false when --help was asked for (the options were printed; exit 0). With
// `positional` (e.g. "dir"), one bare argument is taken as that option (hidden from --help).
inline bool parse_command_options(const std::vector<std::string>& args,
                                  const boost::program_options::options_description& description,
                                  boost::program_options::variables_map& values, const char* command,
                                  const char* positional = nullptr) {
  namespace po = boost::program_options;
  po::options_description all;
  all.add(description);
  po::positional_options_description positions;
  if (positional) {
    po::options_description hidden;
    hidden.add_options()(positional, po::value<std::string>());
    all.add(hidden);
    positions.add(positional, 1);
  }
  try {
    po::store(po::command_line_parser(args).options(all).positional(positions).run(), values);
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

// "q_proj,v_proj" -> {"q_proj", "v_proj"} (empty parts dropped).
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text + ",") {
    if (c != ',') {
      part += c;
    } else if (!part.empty()) {
      parts.push_back(part);
      part.clear();
    }
  }
  return parts;
}

}  // namespace zt
