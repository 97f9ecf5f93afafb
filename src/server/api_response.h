// JSON and Server-Sent-Events output of the HTTP API: error bodies in the OpenAI shape,
// usage blocks, logprobs in the completion and chat layouts, SSE framing.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/request.h"

namespace kvserve::server {

using json = nlohmann::json;

// Serialises without throwing: invalid UTF-8 (which should not reach here) becomes U+FFFD
// instead of an exception inside an HTTP handler.
std::string dump_json(const json& j);

// {"error":{"message","type","code"}}; code is null when empty.
json error_json(const std::string& message, const std::string& type, const std::string& code = "");

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:{cached_tokens}}
json usage_json(const Usage& u);

// One SSE event: "data: <json>\n\n". Our JSON never holds raw newlines, so one data line
// per event is enough.
std::string sse_data(const json& j);
// The OpenAI end-of-stream marker: "data: [DONE]\n\n".
std::string sse_done();

using PieceFn = std::function<std::string(int32_t)>;
// Completions layout: {tokens, token_logprobs, top_logprobs:[{piece: logprob}], text_offset}.
// `text_offset` starts at `offset0` (characters already sent in earlier chunks). An entry whose
// logprob is NaN has none (an echoed prompt's first token): null logprob and top_logprobs.
json completion_logprobs_json(const std::vector<TokenLogprob>& lps, const PieceFn& piece, int64_t offset0 = 0);
// Chat layout: {content:[{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}]}.
json chat_logprobs_json(const std::vector<TokenLogprob>& lps, const PieceFn& piece);

// OpenAI finish_reason for an engine finish reason: stop/length pass through, the others
// ("cancelled", "timeout", "error") are reported as they are.
std::string openai_finish_reason(const std::string& engine_reason);

}  // namespace kvserve::server
