// The GPT-2 byte <-> unicode mapping of byte-level BPE vocabularies.
//
// Byte-level BPE stores every token as text in which each raw byte is replaced by one
// printable code point: the bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves
// (as Latin-1 code points) and the remaining 68 bytes (controls, space, 0x7F..0xA0, 0xAD)
// are moved, in increasing byte order, to U+0100, U+0101, ... So ' ' is 'Ġ' (U+0120) and
// '\n' is 'Ċ' (U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve {

// UTF-8 text of the code point that stands for `byte`.
const std::string& byte_to_unicode_utf8(uint8_t byte);

// Decodes token text back to raw bytes. A code point outside the mapping (added tokens
// sometimes hold such text) is copied through unchanged as UTF-8.
std::string unicode_to_bytes(std::string_view token_text);

}  // namespace kvserve
