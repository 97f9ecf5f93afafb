// Parsing a request body as JSON, with an error that says where and why it is not JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "util/status.h"

namespace kvserve::server {

// The body as JSON (any value; callers check its shape). Not JSON: invalid_argument
// "body: malformed JSON at line L, column C: WHY" (the parser's own words, without the text it
// last read, which can be long). Never throws.
Expected<nlohmann::json> parse_json_body(const std::string& body);

}  // namespace kvserve::server
