// SHA-256 written from FIPS 180-4 (sections 4.1.2, 4.2.2, 5.1.1, 6.2): 64-byte blocks, a
// 64-entry message schedule, eight 32-bit working variables.
#include "core/sha256.h"

#include <bit>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace zt {
namespace {

// First 32 bits of the fractional parts of the cube roots of the first 64 primes (4.2.2).
constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// First 32 bits of the fractional parts of the square roots of the first 8 primes (5.3.3).
constexpr std::array<uint32_t, 8> kInitialState = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

}  // namespace

Sha256::Sha256() : state_(kInitialState) {}

void Sha256::compress_block(const uint8_t* block) {
  std::array<uint32_t, 64> schedule;  // W[0..63]
  for (int t = 0; t < 16; ++t)
    schedule[t] = (uint32_t{block[4 * t]} << 24) | (uint32_t{block[4 * t + 1]} << 16) |
                  (uint32_t{block[4 * t + 2]} << 8) | uint32_t{block[4 * t + 3]};
  for (int t = 16; t < 64; ++t) {
    const uint32_t sigma0 = std::rotr(schedule[t - 15], 7) ^ std::rotr(schedule[t - 15], 18) ^ (schedule[t - 15] >> 3);
    const uint32_t sigma1 = std::rotr(schedule[t - 2], 17) ^ std::rotr(schedule[t - 2], 19) ^ (schedule[t - 2] >> 10);
    schedule[t] = sigma1 + schedule[t - 7] + sigma0 + schedule[t - 16];
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t big_sigma1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t temp1 = h + big_sigma1 + choose + kRoundConstants[t] + schedule[t];
    const uint32_t big_sigma0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t temp2 = big_sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + temp1;
    d = c;
    c = b;
    b = a;
    a = temp1 + temp2;
  }
  state_[0] += a; state_[1] += b; state_[2] += c; state_[3] += d;
  state_[4] += e; state_[5] += f; state_[6] += g; state_[7] += h;
}

void Sha256::update(std::span<const uint8_t> bytes) {
  ZT_CHECK(!finished_, "Sha256::update after hex_digest");
  total_bytes_ += bytes.size();
  size_t used = 0;
  // Complete a pending partial block first, then hash whole blocks straight from the input.
  if (pending_size_ > 0) {
    while (pending_size_ < 64 && used < bytes.size()) pending_[pending_size_++] = bytes[used++];
    if (pending_size_ < 64) return;
    compress_block(pending_.data());
    pending_size_ = 0;
  }
  for (; used + 64 <= bytes.size(); used += 64) compress_block(bytes.data() + used);
  while (used < bytes.size()) pending_[pending_size_++] = bytes[used++];
}

void Sha256::update(std::string_view text) {
  update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::string Sha256::hex_digest() {
  ZT_CHECK(!finished_, "Sha256::hex_digest called twice");
  // Padding (5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, then the message length in bits as a
  // big-endian 64-bit number.
  const uint64_t total_bits = total_bytes_ * 8;
  std::vector<uint8_t> padding{0x80};
  while ((pending_size_ + padding.size()) % 64 != 56) padding.push_back(0);
  for (int shift = 56; shift >= 0; shift -= 8) padding.push_back(static_cast<uint8_t>(total_bits >> shift));
  const uint64_t message_bytes = total_bytes_;
  update(std::span<const uint8_t>(padding));
  total_bytes_ = message_bytes;
  finished_ = true;

  std::string hex;
  for (uint32_t word : state_) {
    char piece[9];
    std::snprintf(piece, sizeof piece, "%08x", word);
    hex += piece;
  }
  return hex;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  return hasher.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open for reading (computing its sha256)");
  Sha256 hasher;
  std::vector<char> buffer(1 << 16);  // [65536] bytes read at a time
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) hasher.update(std::string_view(buffer.data(), static_cast<size_t>(got)));
  }
  ZT_CHECK(in.eof(), path, ": read error (computing its sha256)");
  return hasher.hex_digest();
}

std::string sha256_file_sampled_hex(const std::string& path, int64_t block_bytes, int64_t blocks) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ZT_CHECK(in, path, ": cannot open to checksum it");
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (size <= block_bytes * blocks) return sha256_file_hex(path);
  Sha256 hash;
  hash.update(std::to_string(size) + "\n");
  std::vector<uint8_t> block(static_cast<size_t>(block_bytes));
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t offset = i * (size - block_bytes) / (blocks - 1);  // first block at 0, last ending at size
    in.seekg(offset);
    in.read(reinterpret_cast<char*>(block.data()), block_bytes);
    ZT_CHECK(in, path, ": cannot read ", block_bytes, " bytes at offset ", offset, " to checksum it");
    hash.update(block);
  }
  return hash.hex_digest();
}

}  // namespace zt
