// The byte-level table (data/byte_level.h), built once from its defining rule, and the UTF-8
// encoding/decoding of its code points (all below U+0144, so one or two UTF-8 bytes each).
#include "data/byte_level.h"

#include <array>

namespace zt {
namespace {

// Bytes that stand for themselves: the printable Latin-1 characters except the soft hyphen.
constexpr bool stands_for_itself(unsigned byte) {
  return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
}

struct Table {
  std::array<uint32_t, 256> char_of_byte{};
  std::array<int, 512> byte_of_char{};  // -1 where a code point stands for no byte
  Table() {
    byte_of_char.fill(-1);
    uint32_t next_extra = 256;  // the shifted bytes take U+0100, U+0101, ... in byte order
    for (unsigned byte = 0; byte < 256; ++byte) {
      char_of_byte[byte] = stands_for_itself(byte) ? byte : next_extra++;
      byte_of_char[char_of_byte[byte]] = static_cast<int>(byte);
    }
  }
};

const Table& table() {
  static const Table instance;
  return instance;
}

}  // namespace

uint32_t byte_level_char(uint8_t byte) { return table().char_of_byte[byte]; }

std::string byte_level_encode(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size() * 2);
  for (const char byte : bytes) {
    const uint32_t code = table().char_of_byte[static_cast<uint8_t>(byte)];
    if (code < 0x80) {
      text += static_cast<char>(code);
    } else {  // two-byte UTF-8: 110xxxxx 10xxxxxx
      text += static_cast<char>(0xC0 | (code >> 6));
      text += static_cast<char>(0x80 | (code & 0x3F));
    }
  }
  return text;
}

bool byte_level_decode(std::string_view text, std::string& bytes) {
  for (size_t at = 0; at < text.size();) {
    const auto lead = static_cast<uint8_t>(text[at]);
    uint32_t code = 0;
    if (lead < 0x80) {
      code = lead;
      at += 1;
    } else if ((lead & 0xE0) == 0xC0 && at + 1 < text.size() && (static_cast<uint8_t>(text[at + 1]) & 0xC0) == 0x80) {
      code = ((lead & 0x1Fu) << 6) | (static_cast<uint8_t>(text[at + 1]) & 0x3Fu);
      at += 2;
    } else {
      return false;  // a longer character (or broken UTF-8): above the table's range
    }
    const int byte = code < table().byte_of_char.size() ? table().byte_of_char[code] : -1;
    if (byte < 0) return false;
    bytes += static_cast<char>(byte);
  }
  return true;
}

}  // namespace zt
