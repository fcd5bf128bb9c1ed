// `zerotune estimate`: placeholder until its implementation lands (being written now).
#include "cli/commands.h"
#include "core/error.h"

namespace zt {
int command_estimate(const std::vector<std::string>&) { fail("zerotune estimate is not implemented yet"); }
}  // namespace zt
