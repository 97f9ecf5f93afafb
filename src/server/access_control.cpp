#include "server/access_control.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace kvserve::server {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Equal lengths and bytes, in time that depends on the lengths only.
bool same_bytes(const std::string& a, const std::string& b) {
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

}  // namespace

bool bearer_matches(const std::string& authorization, const std::string& key) {
  if (key.empty() || authorization.size() < 7) return false;
  std::string scheme = authorization.substr(0, 7);
  for (char& c : scheme) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer ") return false;
  return same_bytes(trim(authorization.substr(7)), key);
}

bool route_needs_key(const std::string& path) {
  return path != "/health" && path != "/live" && path != "/metrics";
}

std::string allowed_origin(const std::string& cors_origins, const std::string& origin) {
  if (cors_origins.empty() || origin.empty()) return "";
  if (cors_origins == "*") return "*";
  std::stringstream ss(cors_origins);
  std::string item;
  while (std::getline(ss, item, ','))
    if (trim(item) == origin) return origin;
  return "";
}

Status validate_cors_origins(const std::string& cors_origins) {
  if (cors_origins.empty() || cors_origins == "*") return Status::ok_status();
  std::stringstream ss(cors_origins);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const std::string o = trim(item);
    const size_t sep = o.find("://");
    const bool ok = sep != std::string::npos && sep > 0 && o.size() > sep + 3 && o.back() != '/' &&
                    o.find_first_of(" \t/", sep + 3) == std::string::npos;
    if (!ok)
      return invalid_argument(
          "expected \"*\" or origins such as https://ui.example.com (scheme://host[:port], "
          "comma-separated, no path), got '" +
          o + "'");
  }
  return Status::ok_status();
}

Expected<std::string> resolve_api_key(const std::string& api_key, const std::string& api_key_file) {
  if (!api_key.empty() && !api_key_file.empty())
    return invalid_argument("api_key and api_key_file: set one of them, not both");
  if (api_key_file.empty()) return trim(api_key);
  std::ifstream in(api_key_file);
  if (!in) return not_found("api_key_file: cannot read '" + api_key_file + "'");
  std::string line;
  std::getline(in, line);
  line = trim(line);
  if (line.empty())
    return invalid_argument("api_key_file: '" + api_key_file + "' holds no key on its first line");
  return line;
}

}  // namespace kvserve::server
