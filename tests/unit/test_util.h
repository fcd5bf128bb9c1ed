// Shared helpers of the unit tests: TempDir (a fresh directory removed when the test ends) and
// check_error / check_error_mentions (an action must throw a zt::Error whose message names
// what it should).
#pragma once
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace zt::test {

struct TempDir {
  std::filesystem::path path;

  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "zt-test-XXXXXX").string();
    BOOST_REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `text` to DIR/name and returns the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string target = file(name);
    std::ofstream(target) << text;
    return target;
  }
};

// Runs `action`, which must throw a zt::Error whose message contains every one of `parts`.
inline void check_error_mentions(const std::function<void()>& action, const std::vector<std::string>& parts) {
  try {
    action();
  } catch (const zt::Error& error) {
    const std::string message = error.what();
    for (const std::string& part : parts)
      BOOST_TEST(message.find(part) != std::string::npos, "'" << part << "' is not in: " << message);
    return;
  }
  BOOST_ERROR("no error thrown; expected one mentioning '" << (parts.empty() ? "" : parts.front()) << "'");
}

inline void check_error(const std::function<void()>& action, const std::string& expected) {
  check_error_mentions(action, std::vector<std::string>{expected});
}

}  // namespace zt::test
