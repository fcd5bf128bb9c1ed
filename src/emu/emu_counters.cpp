// Counted calls of the emulated device (emu_internal.h, "call counters"): how often the host
// waited for the device, and how often the virtual-memory driver calls ran, so that tests can
// hold a training step to a documented number of each (a GPU has no such counters; the driver's
// own are not readable). ZT_EMU_CALL_REPORT=PATH: at exit the process writes
//   {"host_waits": {"cudaStreamSynchronize": 12, ...}, "vmm": {"cuMemMap": 40, ...},
//    "copy_bytes": {"device to host, on a compute stream": 96, ...}}
// to PATH.RANK (the MPI rank from the launcher's environment, else the pid), as the memory
// report does (emu_memory.cpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "emu/emu_internal.h"

namespace zt_emu {

namespace {

// category -> call -> count. Never destroyed: calls made by static destructors still count.
using Counts = std::map<std::string, std::map<std::string, uint64_t>>;

std::mutex& counts_lock() {
  static auto* const instance = new std::mutex();
  return *instance;
}

void write_call_report();

Counts& counts() {
  static Counts* const instance = [] {
    auto* made = new Counts();
    if (std::getenv("ZT_EMU_CALL_REPORT")) std::atexit(write_call_report);
    return made;
  }();
  return *instance;
}

void write_call_report() {
  std::FILE* file = std::fopen(report_path("ZT_EMU_CALL_REPORT").c_str(), "w");
  if (file == nullptr) return;
  std::lock_guard lock(counts_lock());
  std::fprintf(file, "{");
  const char* category_separator = "";
  for (const auto& [category, calls] : counts()) {
    std::fprintf(file, "%s\"%s\": {", category_separator, category.c_str());
    const char* separator = "";
    for (const auto& [call, count] : calls) {
      std::fprintf(file, "%s\"%s\": %llu", separator, call.c_str(), static_cast<unsigned long long>(count));
      separator = ", ";
    }
    std::fprintf(file, "}");
    category_separator = ", ";
  }
  std::fprintf(file, "}\n");
  std::fclose(file);
}

}  // namespace

std::string report_path(const char* variable) {
  std::string path = std::getenv(variable);
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMI_RANK");
  path += '.';  // appended piece by piece: GCC 12 warns (-Wrestrict, falsely) about "." + string
  path += rank ? std::string(rank) : std::to_string(getpid());
  return path;
}

static bool capturing = false;  // between cudaProfilerStart and cudaProfilerStop (under counts_lock)

void count_call(const char* category, const char* call, uint64_t amount) {
  std::lock_guard lock(counts_lock());
  counts()[category][call] += amount;
  if (capturing) counts()[std::string("captured ") + category][call] += amount;
}

void set_capturing(bool start) {
  std::lock_guard lock(counts_lock());
  if (start && !capturing) ++counts()["capture_ranges"]["cudaProfilerStart"];
  capturing = start;
}

}  // namespace zt_emu
