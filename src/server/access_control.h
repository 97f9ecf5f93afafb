// Who may use the server: an API key that requests present as "Authorization: Bearer KEY", and
// the browser origins that may call it (CORS). Pure functions; http_server.cpp applies them in
// its pre-routing handler, before a request's body is read.
#pragma once

#include <string>

#include "util/status.h"

namespace kvserve::server {

// Whether the Authorization header's value presents `key` ("Bearer KEY", the scheme's case
// ignored). The comparison takes the same time wherever the first difference is, so timing does
// not reveal how much of a guess was right.
bool bearer_matches(const std::string& authorization, const std::string& key);

// Routes open without the key: liveness and readiness probes and the Prometheus scrape.
bool route_needs_key(const std::string& path);

// The Access-Control-Allow-Origin value for a request from `origin` under `cors_origins` ("" no
// origin, "*" any, else a comma-separated list of exact origins such as
// "https://ui.example.com,http://localhost:3000"); "" when that origin may not call.
std::string allowed_origin(const std::string& cors_origins, const std::string& origin);

// Checks a cors_origins value: "", "*", or origins "scheme://host[:port]" separated by commas.
Status validate_cors_origins(const std::string& cors_origins);

// The key a server requires: `api_key`, or the first line of `api_key_file` (trailing
// whitespace dropped); "" when neither is set. Both set, an unreadable or empty file: an error.
Expected<std::string> resolve_api_key(const std::string& api_key, const std::string& api_key_file);

}  // namespace kvserve::server
