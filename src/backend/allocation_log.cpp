// ZT_ALLOCATION_LOG (see allocation_log.h).
#include "backend/allocation_log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "backend/backend.h"
#include "core/error.h"

namespace zt {

namespace {

// The log file, opened at the first use when ZT_ALLOCATION_LOG is set (null otherwise). Lines
// are flushed at exit; a mutex keeps lines of threads (pinned-memory staging) whole.
struct AllocationLog {
  std::FILE* file = nullptr;
  std::mutex mutex;
  AllocationLog() {
    const char* prefix = std::getenv("ZT_ALLOCATION_LOG");
    if (!prefix || !*prefix) return;
    const std::string path = cat(prefix, ".", getpid());
    file = std::fopen(path.c_str(), "w");
    ZT_CHECK(file != nullptr, "ZT_ALLOCATION_LOG: cannot write ", path);
  }
  ~AllocationLog() {
    if (file) std::fclose(file);
  }
};

AllocationLog& allocation_log() {
  static AllocationLog log;
  return log;
}

}  // namespace

bool allocation_log_enabled() { return allocation_log().file != nullptr; }

void log_allocation(const std::string& backend, size_t bytes, const void* address, bool scratch) {
  AllocationLog& log = allocation_log();
  if (!log.file) return;
  std::lock_guard<std::mutex> lock(log.mutex);
  std::fprintf(log.file, "%s %s %zu %p\n", scratch ? "scratch" : "alloc", backend.c_str(), bytes, address);
}

void log_release(const std::string& backend, const void* address) {
  AllocationLog& log = allocation_log();
  if (!log.file) return;
  std::lock_guard<std::mutex> lock(log.mutex);
  std::fprintf(log.file, "release %s %p\n", backend.c_str(), address);
}

void log_allocation_mark(const Backend& backend, const char* name) {
  AllocationLog& log = allocation_log();
  if (!log.file) return;
  std::lock_guard<std::mutex> lock(log.mutex);
  std::fprintf(log.file, "mark %s %s\n", name, backend.name().c_str());
}

}  // namespace zt
