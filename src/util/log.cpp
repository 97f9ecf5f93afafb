#include "util/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace kvserve {
namespace {
std::atomic<int> g_level{int(LogLevel::kWarn)};
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    default: return "off";
  }
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(int(level)); }
LogLevel log_level() { return LogLevel(g_level.load(std::memory_order_relaxed)); }

bool parse_log_level(const std::string& s, LogLevel* out) {
  for (int l = 0; l <= int(LogLevel::kOff); ++l) {
    if (s == level_name(LogLevel(l))) {
      *out = LogLevel(l);
      return true;
    }
  }
  return false;
}

void log_line(LogLevel level, const std::string& message) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  int ms = int(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  // One fprintf call so concurrent lines do not interleave.
  std::fprintf(stderr, "%s.%03dZ %s %s\n", ts, ms, level_name(level), message.c_str());
}

}  // namespace kvserve
