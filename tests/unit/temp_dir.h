// TempDir: a fresh directory under the system temp dir for one test, removed with everything
// in it when the test ends.
#pragma once
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace zt::test
