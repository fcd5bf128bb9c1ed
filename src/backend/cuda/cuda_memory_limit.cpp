// ZT_DEVICE_MEMORY_LIMIT: the process's device-memory limit and its count (cuda_memory_limit.h).
#include "backend/cuda/cuda_memory_limit.h"

#include <atomic>
#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace zt::cuda {
namespace {

std::atomic<size_t> counted_bytes{0};

}  // namespace

size_t parse_memory_size(const std::string& name, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "KiB") shift = 10;
  else if (unit == "MiB") shift = 20;
  else if (unit == "GiB") shift = 30;
  else if (unit == "TiB") shift = 40;
  ZT_CHECK(digits > 0 && digits <= 15 && shift >= 0, name, "='", text,
           "' is not a memory size: give bytes (1073741824) or a number with KiB, MiB, GiB or TiB (12GiB)");
  const size_t value = std::stoull(text.substr(0, digits));
  ZT_CHECK(value > 0, name, "='", text, "': the limit must be more than 0 bytes");
  ZT_CHECK(shift == 0 || value < (size_t{1} << (63 - shift)), name, "='", text, "' is too large");
  return value << shift;
}

std::optional<size_t> device_memory_limit() {
  // Read once: every allocation asks, and the value must not change during a run.
  static const std::optional<size_t> limit = []() -> std::optional<size_t> {
    const char* text = std::getenv("ZT_DEVICE_MEMORY_LIMIT");
    if (text == nullptr || *text == '\0') return std::nullopt;
    return parse_memory_size("ZT_DEVICE_MEMORY_LIMIT", text);
  }();
  return limit;
}

size_t device_memory_counted() { return counted_bytes.load(); }

void charge_device_memory(size_t bytes, int device, const char* what) {
  const size_t before = counted_bytes.fetch_add(bytes);
  const std::optional<size_t> limit = device_memory_limit();
  if (!limit || before + bytes <= *limit) return;
  counted_bytes.fetch_sub(bytes);
  fail("cuda: out of memory on device ", device, " (rank ", process_rank(), "): cannot allocate ", bytes,
       " bytes for ", what, "; zerotune holds ", before, " bytes of the device, its limit is ", *limit,
       " bytes (ZT_DEVICE_MEMORY_LIMIT; lower the micro-batch size or sequence length, or use "
       "ZeRO/offload/activation checkpointing)");
}

void uncharge_device_memory(size_t bytes) { counted_bytes.fetch_sub(bytes); }

}  // namespace zt::cuda
