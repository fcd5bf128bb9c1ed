// The byte-to-character table of byte-level BPE (GPT-2's bytes_to_unicode, used unchanged by
// HF tokenizers' ByteLevel, OPT, Llama-3, Qwen2): every byte of the UTF-8 text becomes one
// printable character, so a vocabulary of strings covers any byte sequence without an unknown
// token. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points); the
// other 68 bytes (0x00..0x20, 0x7F..0xA0, 0xAD), in increasing order, become U+0100, U+0101, ...
// (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace zt {

// The code point that stands for `byte`.
uint32_t byte_level_char(uint8_t byte);

// Each byte of `bytes` as its character, UTF-8 encoded (what the BPE model's vocabulary holds).
std::string byte_level_encode(std::string_view bytes);

// The inverse: appends to `bytes` the byte of each character of `text` and returns true; returns
// false (leaving `bytes` with what was decoded so far) at a character that stands for no byte.
bool byte_level_decode(std::string_view text, std::string& bytes);

}  // namespace zt
