// A file written whole or not at all: the bytes go to PATH.tmp, and commit() flushes it to disk
// and renames it over PATH; a file never committed (an error on the way) is removed. Every
// system call is checked and named in the error.
#pragma once
#include <cstddef>
#include <string>

namespace zt {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace zt
