// ZT_ALLOCATION_LOG=PREFIX: every backend allocation and release of this process, in order,
// written to PREFIX.<pid> as lines
//   alloc <backend> <bytes> <address>     (allocate and allocate_discardable)
//   scratch <backend> <bytes> <address>   (a buffer a backend's op keeps to itself: CUDA's scratch())
//   release <backend> <address>
//   mark <name> <backend name()>          (a point both the memory model and the run pass)
// where <backend> is "cpu", "cuda" or "counting" (the memory model's). The memory model counts on
// the counting backend what the run then allocates on its own: a test (test_allocation_drift.py)
// reads one training process's log and checks that the two sequences agree between the marks.
// Unset: nothing is written and each call costs one test of a flag.
#pragma once
#include <cstddef>
#include <string>

namespace zt {

class Backend;

bool allocation_log_enabled();
void log_allocation(const std::string& backend, size_t bytes, const void* address, bool scratch = false);
void log_release(const std::string& backend, const void* address);
void log_allocation_mark(const Backend& backend, const char* name);

}  // namespace zt
