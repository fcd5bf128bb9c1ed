// `zerotune inspect`: placeholder until its implementation lands (being written now).
#include "cli/commands.h"
#include "core/error.h"

namespace zt {
int command_inspect(const std::vector<std::string>&) { fail("zerotune inspect is not implemented yet"); }
}  // namespace zt
