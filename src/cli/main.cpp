// zerotune's entry point: dispatches to the subcommands (cli/commands.h).
#include "cli/commands.h"

int main(int argc, char** argv) { return zt::run_cli(argc, argv); }
