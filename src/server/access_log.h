// One structured line per request, written to stderr in text or JSON.
#pragma once

#include <cstdint>
#include <string>

namespace kvserve::server {

struct AccessLogEntry {
  uint64_t id = 0;  // engine request id; 0 when the request never reached the engine
  std::string method;
  std::string route;
  int status = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t context_shifts = 0;  // context_overflow shift: times the context was shifted
  double queue_ms = 0;
  double ttft_ms = 0;
  double total_ms = 0;
  std::string finish_reason;
  std::string error;
};

// text: `request id=7 method=POST route=/generate status=200 prompt_tokens=5 ...`
// json: {"ts":...,"level":"info","msg":"request","id":7,...}
std::string format_access_log(const AccessLogEntry& e, bool json_format);
// Writes the formatted line (one write call, so concurrent lines do not interleave) when
// the log level admits info.
void write_access_log(const AccessLogEntry& e, bool json_format);

}  // namespace kvserve::server
