// ZT_FAULT parsing and the faults themselves.
#include "core/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace zt {

namespace {

struct FaultSpec {
  bool armed = false;
  std::string action, point;
  int rank = 0;
  int64_t step = -1;  // -1: any step
};

FaultSpec parse_fault_spec() {
  FaultSpec spec;
  const char* text = std::getenv("ZT_FAULT");
  if (!text || !*text) return spec;
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ':');) parts.push_back(part);
  ZT_CHECK(parts.size() == 3 || parts.size() == 4, "ZT_FAULT='", text, "': expected ACTION:POINT:RANK[:STEP]");
  spec.action = parts[0];
  spec.point = parts[1];
  ZT_CHECK(spec.action == "throw" || spec.action == "hang" || spec.action == "kill" || spec.action == "sigterm",
           "ZT_FAULT='", text, "': ACTION must be throw, hang, kill or sigterm");
  try {
    spec.rank = std::stoi(parts[2]);
    if (parts.size() == 4) spec.step = std::stoll(parts[3]);
  } catch (const std::exception&) {
    fail("ZT_FAULT='", text, "': RANK and STEP must be integers");
  }
  spec.armed = true;
  return spec;
}

}  // namespace

void fault_point(const char* point, int64_t step) {
  static const FaultSpec spec = parse_fault_spec();
  if (!spec.armed || spec.point != point || spec.rank != process_rank() || (spec.step >= 0 && spec.step != step)) return;
  if (spec.action == "throw") fail("injected fault (ZT_FAULT) at ", point, ", step ", step);
  if (spec.action == "kill") std::raise(SIGKILL);
  if (spec.action == "sigterm") {
    std::raise(SIGTERM);
    return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang
}

}  // namespace zt
