#include "tokenizer/utf8.h"

namespace kvserve::utf8 {

void append_codepoint(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

SequenceCheck check_sequence(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {SequenceCheck::kValid, 1};
  size_t need = 0;
  // The second byte's allowed range excludes overlongs (E0, F0), surrogates (ED) and
  // code points above U+10FFFF (F4); later bytes are plain continuation bytes.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SequenceCheck::kInvalid, 1};  // continuation byte, C0/C1 or F5..FF
  }
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= s.size()) return {SequenceCheck::kIncomplete, k};
    const auto b = static_cast<uint8_t>(s[pos + k]);
    const uint8_t min = k == 1 ? lo : 0x80;
    const uint8_t max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {SequenceCheck::kInvalid, k};
  }
  return {SequenceCheck::kValid, need};
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const SequenceCheck c = check_sequence(s, pos);
    if (c.kind == SequenceCheck::kValid) {
      out.append(s.substr(pos, c.length));
    } else {
      out.append(kReplacement);
    }
    pos += c.length;
  }
  return out;
}

std::string escape_for_display(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const auto c = static_cast<uint8_t>(s[pos]);
    const SequenceCheck chk = check_sequence(s, pos);
    if (chk.kind == SequenceCheck::kValid && chk.length > 1) {
      const auto next = static_cast<uint8_t>(s[pos + 1]);
      if (c == 0xC2 && next < 0xA0) {  // a C1 control character, U+0080..U+009F
        out += "\\u00";
        out += kHex[next >> 4];
        out += kHex[next & 15];
      } else {
        out.append(s.substr(pos, chk.length));
      }
      pos += chk.length;
      continue;
    }
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\'':
        out += "\\'";
        break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out += char(c);
        } else {  // another control character, or a byte outside any valid character
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        }
    }
    ++pos;
  }
  return out;
}

}  // namespace kvserve::utf8
