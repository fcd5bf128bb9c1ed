// StoredZipWriter (ckpt/zip_writer.h).
#include "ckpt/zip_writer.h"

#include <zlib.h>

#include <limits>

#include "core/error.h"

namespace zt {

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint16_t kVersionZip64 = 45;       // "4.5 - File uses ZIP64 format extensions"
constexpr uint16_t kZip64ExtraId = 0x0001;   // APPNOTE 4.5.3
constexpr uint16_t kPaddingExtraId = 0x4246; // "FB": the alignment padding PyTorch's writer uses
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr uint32_t kAll32 = 0xFFFFFFFFu;     // "see the ZIP64 extra field"
constexpr uint64_t kDataAlignment = 64;
constexpr size_t kLocalHeaderBytes = 30;
constexpr size_t kExtraHeaderBytes = 4;      // id + size of one extra field

// Little-endian fields appended to a record.
void put16(std::string& out, uint16_t value) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}
void put32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}
void put64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

uint32_t crc32_of(const void* data, size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* cursor = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib's length is a uInt
    const auto chunk = static_cast<uInt>(std::min<size_t>(bytes, std::numeric_limits<uInt>::max()));
    crc = crc32(crc, cursor, chunk);
    cursor += chunk;
    bytes -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

// The fields local and central headers share from "version needed" to the name length:
// stored, no flags, the DOS epoch, the CRC, sizes deferred to the ZIP64 extra field.
void put_common_fields(std::string& out, uint32_t crc, size_t name_bytes) {
  put16(out, kVersionZip64);
  put16(out, 0);  // general purpose flags
  put16(out, 0);  // method: stored
  put16(out, 0);  // time 00:00:00
  put16(out, kDosDate1980);
  put32(out, crc);
  put32(out, kAll32);  // compressed size
  put32(out, kAll32);  // uncompressed size
  put16(out, static_cast<uint16_t>(name_bytes));
}

}  // namespace

StoredZipWriter::StoredZipWriter(const std::string& path) : path_(path), file_(path) {}

void StoredZipWriter::put(const std::string& bytes) {
  file_.write(bytes.data(), bytes.size());
  offset_ += bytes.size();
}

void StoredZipWriter::add(const std::string& name, const void* data, size_t bytes) {
  ZT_CHECK(!name.empty() && name.size() < 0xFFFF, path_, ": a zip entry name of ", name.size(), " bytes");
  Entry entry{name, crc32_of(data, bytes), bytes, offset_};
  // Local header: the ZIP64 extra field (both sizes), then padding up to the alignment.
  constexpr size_t kZip64LocalBytes = kExtraHeaderBytes + 16;
  const uint64_t unpadded = offset_ + kLocalHeaderBytes + name.size() + kZip64LocalBytes + kExtraHeaderBytes;
  const size_t padding = static_cast<size_t>((kDataAlignment - unpadded % kDataAlignment) % kDataAlignment);
  std::string header;
  put32(header, kLocalHeaderSignature);
  put_common_fields(header, entry.crc, name.size());
  put16(header, static_cast<uint16_t>(kZip64LocalBytes + kExtraHeaderBytes + padding));
  header += name;
  put16(header, kZip64ExtraId);
  put16(header, 16);
  put64(header, bytes);  // uncompressed
  put64(header, bytes);  // compressed (stored: the same)
  put16(header, kPaddingExtraId);
  put16(header, static_cast<uint16_t>(padding));
  header.append(padding, '\0');
  put(header);
  file_.write(data, bytes);
  offset_ += bytes;
  entries_.push_back(std::move(entry));
}

void StoredZipWriter::finish() {
  const uint64_t directory_offset = offset_;
  for (const Entry& entry : entries_) {
    std::string header;
    put32(header, kCentralHeaderSignature);
    put16(header, kVersionZip64);  // version made by (MS-DOS attributes)
    put_common_fields(header, entry.crc, entry.name.size());
    put16(header, kExtraHeaderBytes + 24);  // extra field length
    put16(header, 0);                       // comment length
    put16(header, 0);                       // disk number start
    put16(header, 0);                       // internal attributes
    put32(header, 0);                       // external attributes
    put32(header, kAll32);                  // local header offset: in the extra field
    header += entry.name;
    put16(header, kZip64ExtraId);
    put16(header, 24);
    put64(header, entry.bytes);
    put64(header, entry.bytes);
    put64(header, entry.header_offset);
    put(header);
  }
  const uint64_t directory_bytes = offset_ - directory_offset;
  const uint64_t zip64_end_offset = offset_;
  std::string end;
  put32(end, kZip64EndSignature);
  put64(end, 44);  // the record's size after this field
  put16(end, kVersionZip64);
  put16(end, kVersionZip64);
  put32(end, 0);  // this disk
  put32(end, 0);  // the disk with the central directory
  put64(end, entries_.size());
  put64(end, entries_.size());
  put64(end, directory_bytes);
  put64(end, directory_offset);
  put32(end, kZip64LocatorSignature);
  put32(end, 0);
  put64(end, zip64_end_offset);
  put32(end, 1);  // total disks
  put32(end, kEndSignature);
  put16(end, 0);
  put16(end, 0);
  put16(end, 0xFFFF);  // entries: in the ZIP64 record
  put16(end, 0xFFFF);
  put32(end, kAll32);  // directory size and offset: in the ZIP64 record
  put32(end, kAll32);
  put16(end, 0);       // comment length
  put(end);
  file_.commit();
}

}  // namespace zt
