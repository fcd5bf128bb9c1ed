// AtomicFile (core/atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace zt {

AtomicFile::AtomicFile(const std::string& path) : path_(path), temp_path_(path + ".tmp") {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(temp_path_, ": cannot create: ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t written = ::write(fd_, cursor, std::min<size_t>(bytes, size_t{1} << 30));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) fail(temp_path_, ": write failed: ", std::strerror(errno));
    cursor += written;
    bytes -= static_cast<size_t>(written);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail(temp_path_, ": fsync failed: ", std::strerror(errno));
  int result = ::close(fd_);
  fd_ = -1;
  if (result != 0) fail(temp_path_, ": close failed: ", std::strerror(errno));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail(path_, ": cannot rename ", temp_path_, " to it: ", std::strerror(errno));
  committed_ = true;
}

}  // namespace zt
