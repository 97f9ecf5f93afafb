#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/utf8.h"

namespace kvserve {
namespace {

// The mapped code points span U+0021..U+0143.
constexpr char32_t kMaxMapped = 0x100 + 68;

struct ByteUnicodeTables {
  std::array<std::string, 256> utf8_of_byte;
  std::array<int16_t, kMaxMapped> byte_of_cp;  // -1: not a mapped code point

  ByteUnicodeTables() {
    byte_of_cp.fill(-1);
    char32_t next_moved = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? char32_t(b) : next_moved++;
      utf8::append_codepoint(utf8_of_byte[b], cp);
      byte_of_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteUnicodeTables& tables() {
  static const ByteUnicodeTables t;
  return t;
}

}  // namespace

const std::string& byte_to_unicode_utf8(uint8_t byte) { return tables().utf8_of_byte[byte]; }

std::string unicode_to_bytes(std::string_view text) {
  const ByteUnicodeTables& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const utf8::SequenceCheck c = utf8::check_sequence(text, pos);
    if (c.kind != utf8::SequenceCheck::kValid) {
      out.append(text.substr(pos, c.length));  // not mapping text: pass through
      pos += c.length;
      continue;
    }
    // Decode the code point of this valid sequence.
    const auto b0 = static_cast<uint8_t>(text[pos]);
    char32_t cp = c.length == 1   ? b0
                  : c.length == 2 ? (b0 & 0x1F)
                  : c.length == 3 ? (b0 & 0x0F)
                                  : (b0 & 0x07);
    for (size_t k = 1; k < c.length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3F);
    if (cp < kMaxMapped && t.byte_of_cp[cp] >= 0) {
      out.push_back(static_cast<char>(t.byte_of_cp[cp]));
    } else {
      out.append(text.substr(pos, c.length));
    }
    pos += c.length;
  }
  return out;
}

}  // namespace kvserve
