// SHA-256 (FIPS 180-4) of bytes and of files, as lowercase hex. Used to record which tokenizer
// file a dataset was made with (the tokenizer_sha256 shard attribute), so it must agree with
// `sha256sum`.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace zt {

// Incremental hasher: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  std::string hex_digest();  // finishes the hash; the object must not be updated afterwards

 private:
  void compress_block(const uint8_t* block);  // block: 64 bytes
  std::array<uint32_t, 8> state_;             // H0..H7
  std::array<uint8_t, 64> pending_{};         // bytes of a not yet complete block
  size_t pending_size_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);
// Streams the file; an unreadable file is a zt::Error naming it.
std::string sha256_file_hex(const std::string& path);
// A cheap identity of a large file: sha256 over its size and `blocks` blocks of `block_bytes`
// spread evenly from its first to its last byte (the whole file when it is not larger than
// that). Two different weight or data files of the same size almost surely differ in some
// sampled block; reading 4 MiB instead of 13 GB keeps it affordable at every start.
std::string sha256_file_sampled_hex(const std::string& path, int64_t block_bytes = 65536, int64_t blocks = 64);

}  // namespace zt
