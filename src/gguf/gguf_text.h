// Internal: rendering of untrusted file text (keys, tensor names, string values) for error
// messages and `inspect`, so a corrupt name cannot inject control bytes or flood a log line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvserve {

// Quoted with '...', control bytes as \xNN, cut after `max_len` bytes with "...".
std::string gguf_quote(std::string_view s, size_t max_len = 96, char quote = '\'');

}  // namespace kvserve
