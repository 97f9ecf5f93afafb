#include "util/status.h"

#include <cstdio>
#include <cstdlib>

namespace kvserve {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorrupt: return "Corrupt";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kOutOfMemory: return "OutOfMemory";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kUnavailable: return "Unavailable";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "kvserve: invariant violated at %s:%d: %s (%s)\n", file, line, expr, msg);
  std::abort();
}

}  // namespace kvserve
