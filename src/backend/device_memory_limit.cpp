// The process's device-memory limit: the flag or ZT_DEVICE_MEMORY_LIMIT (device_memory_limit.h).
#include "backend/device_memory_limit.h"

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace zt {
namespace {

std::mutex limit_mutex;
std::optional<DeviceMemoryLimit> given_limit;  // set_device_memory_limit's
bool limit_read = false;                       // device_memory_limit_setting() answered: now fixed

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

void set_device_memory_limit(size_t bytes, const std::string& source) {
  std::lock_guard<std::mutex> lock(limit_mutex);
  ZT_CHECK(!limit_read || (given_limit && given_limit->bytes == bytes), source,
           ": the device-memory limit is set after the device was first used (it must not change during a run)");
  given_limit = DeviceMemoryLimit{bytes, source};
}

std::optional<DeviceMemoryLimit> device_memory_limit_setting() {
  {
    std::lock_guard<std::mutex> lock(limit_mutex);
    limit_read = true;
    if (given_limit) return given_limit;  // the flag wins (the environment is then not read)
  }
  // Every allocation asks: the environment is read once.
  static const std::optional<DeviceMemoryLimit> from_environment = []() -> std::optional<DeviceMemoryLimit> {
    const char* text = std::getenv("ZT_DEVICE_MEMORY_LIMIT");
    if (text == nullptr || *text == '\0') return std::nullopt;
    return DeviceMemoryLimit{parse_memory_size("ZT_DEVICE_MEMORY_LIMIT", text), "ZT_DEVICE_MEMORY_LIMIT"};
  }();
  return from_environment;
}

}  // namespace zt
