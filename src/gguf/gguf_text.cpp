#include "gguf/gguf_text.h"

#include <cstdio>

namespace kvserve {

std::string gguf_quote(std::string_view s, size_t max_len, char quote) {
  std::string out(1, quote);
  size_t n = s.size() < max_len ? s.size() : max_len;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      // Bytes >= 0x80 pass through so UTF-8 tokens ("\u2581the") stay readable in `inspect`.
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  if (n < s.size()) out += "...";
  out += quote;
  return out;
}

}  // namespace kvserve
