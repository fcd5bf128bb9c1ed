// A ZIP archive of stored (uncompressed) entries, written front to back in one pass, as PyTorch's
// torch.save container needs it (ckpt/torch_state_dict.h). The records follow PKWARE's APPNOTE
// (4.3.7 local file header, 4.3.12 central directory header, 4.3.14-16 the ZIP64 end of central
// directory record, its locator and the end of central directory record) with ZIP64 extra fields
// (4.5.3) on every entry, so that no entry, offset or archive size has a 4 GiB limit: the 32-bit
// size and offset fields hold 0xFFFFFFFF and the real values are in the extra field. Each entry's
// data starts at a multiple of 64 bytes in the file (padded by an extra field of its own, as
// PyTorch's writer does, so that readers may map the tensors in place). Times are 1980-01-01
// 00:00 (the DOS epoch): the same inputs give the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/atomic_file.h"

namespace zt {

class StoredZipWriter {
 public:
  // Creates PATH.tmp; finish() renames it over PATH (an unfinished archive is removed).
  explicit StoredZipWriter(const std::string& path);

  // Adds an entry NAME holding BYTES bytes at DATA (its CRC-32 computed here).
  void add(const std::string& name, const void* data, size_t bytes);
  // Writes the central directory and the end records, flushes and renames the file.
  void finish();

 private:
  struct Entry {
    std::string name;
    uint32_t crc = 0;
    uint64_t bytes = 0;
    uint64_t header_offset = 0;  // of its local file header
  };
  void put(const std::string& bytes);

  std::string path_;
  AtomicFile file_;
  uint64_t offset_ = 0;  // bytes written so far
  std::vector<Entry> entries_;
};

}  // namespace zt
