// Fault injection for the failure tests: the environment variable
//   ZT_FAULT="ACTION:POINT:RANK[:STEP]"
// makes rank RANK, on reaching the named point (at optimizer step STEP, 1-based; any step when
// omitted), throw an error (ACTION throw), hang forever (hang: the other ranks' collectives
// must time out), or die at once without cleanup (kill: SIGKILL, as the OOM killer or a node
// failure would), or send itself SIGTERM and go on (sigterm: a stop request from the batch
// system at that moment). Points are named where the code calls fault_point, e.g. "step" (in
// the middle of a step, between forward and backward) or "load" (after each unit of base
// weights is loaded; STEP is the unit's index there).
#pragma once
#include <cstdint>

namespace zt {

void fault_point(const char* point, int64_t step);

}  // namespace zt
