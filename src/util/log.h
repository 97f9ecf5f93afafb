// Minimal leveled logger to stderr. Thread-safe (one line per call, written atomically).
#pragma once

#include <string>

namespace kvserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
bool parse_log_level(const std::string& s, LogLevel* out);
void log_line(LogLevel level, const std::string& message);

#define KVS_LOG(level, msg)                                                 \
  do {                                                                      \
    if ((level) >= ::kvserve::log_level()) ::kvserve::log_line(level, msg); \
  } while (0)
#define KVS_DEBUG(msg) KVS_LOG(::kvserve::LogLevel::kDebug, msg)
#define KVS_INFO(msg) KVS_LOG(::kvserve::LogLevel::kInfo, msg)
#define KVS_WARN(msg) KVS_LOG(::kvserve::LogLevel::kWarn, msg)
#define KVS_ERROR(msg) KVS_LOG(::kvserve::LogLevel::kError, msg)

}  // namespace kvserve
