#include "util/units.h"

#include "util/memory_info.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kvserve {

Expected<uint64_t> parse_bytes(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return invalid_argument("not a byte size: '" + text + "'");
  std::string unit;
  for (const char* p = end; *p; ++p)
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += char(std::tolower(static_cast<unsigned char>(*p)));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else return invalid_argument("unknown byte unit in '" + text + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double bytes = v * mult;
  if (bytes > 1.8e19) return invalid_argument("byte size too large: '" + text + "'");
  return uint64_t(bytes);
}

uint64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

Expected<uint64_t> parse_memory_budget(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  bool plain_number = end != text.c_str() && *end == '\0';
  if (plain_number && v > 0 && v <= 1.0 && text.find('.') != std::string::npos)
    return uint64_t(v * double(memory_limit_bytes()));
  return parse_bytes(text);
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace kvserve
