// The one error type of zerotune, and helpers to build messages with their context
// (file, key, rank). Every failure that reaches the user is a zt::Error.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates anything that has operator<< into one string.
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

// This process's rank in the job (0 until the communicator is up); the top-level handler
// prefixes every message with it so a user of a 64-rank job knows who failed.
int& process_rank();

}  // namespace zt

#define ZT_CHECK(condition, ...)                 \
  do {                                           \
    if (!(condition)) ::zt::fail(__VA_ARGS__);   \
  } while (0)
