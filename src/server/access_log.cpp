#include "server/access_log.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "util/log.h"

namespace kvserve::server {
namespace {

std::string timestamp() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", ts, int(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000));
  return out;
}

std::string ms(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Quotes a text value (JSON string escapes) when it holds a space, a quote, '=', a backslash or a
// control character, so the line stays one splittable line: a client's path (decoded: %0A is a
// newline, %1B an escape) must not start a fake log line or send terminal escapes to a reader.
std::string text_value(const std::string& v) {
  const bool plain = !v.empty() && std::none_of(v.begin(), v.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c <= 0x20 || c == 0x7F || c == '"' || c == '=' || c == '\\';
  });
  if (plain) return v;
  std::string quoted = nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // JSON leaves DEL as it is; escape it like the other control characters.
  for (size_t at; (at = quoted.find('\x7f')) != std::string::npos;) quoted.replace(at, 1, "\\u007f");
  return quoted;
}

}  // namespace

std::string format_access_log(const AccessLogEntry& e, bool json_format) {
  if (json_format) {
    nlohmann::json j = {{"ts", timestamp()},          {"level", "info"},
                        {"msg", "request"},           {"id", e.id},
                        {"method", e.method},         {"route", e.route},
                        {"status", e.status},         {"prompt_tokens", e.prompt_tokens},
                        {"cached_tokens", e.cached_tokens}, {"generated_tokens", e.generated_tokens},
                        {"queue_ms", e.queue_ms},     {"ttft_ms", e.ttft_ms},
                        {"total_ms", e.total_ms}};
    if (!e.finish_reason.empty()) j["finish_reason"] = e.finish_reason;
    if (e.context_shifts > 0) j["context_shifts"] = e.context_shifts;
    if (!e.error.empty()) j["error"] = e.error;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string s = timestamp() + " info request id=" + std::to_string(e.id) + " method=" + e.method +
                  " route=" + text_value(e.route) + " status=" + std::to_string(e.status) +
                  " prompt_tokens=" + std::to_string(e.prompt_tokens) + " cached_tokens=" +
                  std::to_string(e.cached_tokens) + " generated_tokens=" + std::to_string(e.generated_tokens) +
                  " queue_ms=" + ms(e.queue_ms) + " ttft_ms=" + ms(e.ttft_ms) + " total_ms=" + ms(e.total_ms);
  if (!e.finish_reason.empty()) s += " finish_reason=" + e.finish_reason;
  if (e.context_shifts > 0) s += " context_shifts=" + std::to_string(e.context_shifts);
  if (!e.error.empty()) s += " error=" + text_value(e.error);
  return s;
}

void write_access_log(const AccessLogEntry& e, bool json_format) {
  if (log_level() > LogLevel::kInfo) return;
  std::string line = format_access_log(e, json_format) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kvserve::server
