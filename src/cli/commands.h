// The `zerotune` subcommands. run_cli parses the subcommand, runs it inside the top-level
// error handler (message with rank, non-zero exit on every rank) and returns the exit code.
#pragma once
#include <string>
#include <vector>

namespace zt {

int run_cli(int argc, char** argv);

// Each subcommand gets the arguments after its name.
int command_init(const std::vector<std::string>& args);
int command_train(const std::vector<std::string>& args);
int command_prep(const std::vector<std::string>& args);
int command_inspect(const std::vector<std::string>& args);
int command_estimate(const std::vector<std::string>& args);
int command_export(const std::vector<std::string>& args);
int command_report(const std::vector<std::string>& args);
int command_selftest(const std::vector<std::string>& args);
int command_autotune(const std::vector<std::string>& args);
int command_generate(const std::vector<std::string>& args);

}  // namespace zt
