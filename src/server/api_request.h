// JSON request bodies of /generate, /v1/completions and /v1/chat/completions, validated and
// mapped onto SamplingParams. Every rejection is a 400 whose message names the field and the
// accepted range. Unknown fields are ignored (OpenAI clients send many we do not use).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/sampling_params.h"
#include "server/chat_template.h"
#include "util/status.h"

namespace kvserve::server {

enum class Route { kGenerate, kCompletion, kChat };

struct ApiLimits {
  int max_tokens_limit = 4096;  // the largest max_tokens accepted
  // context_overflow: truncate. A prompt too long for the context is cut by the engine (oldest
  // tokens after the BOS), so only max_tokens itself must fit.
  bool truncate_prompt = false;
  // context_overflow: shift. The context shifts as generation goes and a too long prompt is
  // cut by the engine (after the n_keep sink tokens): max_tokens is bounded by max_tokens_limit
  // only, and a chat without max_tokens runs up to that limit.
  bool shift_context = false;
};

// The most choices one completion or chat request may ask for (each is an engine request).
constexpr int kMaxChoices = 16;
// The most prompts one completion request may batch (each prompt times n is an engine request,
// all of which must fit in the queue: max_queue, checked when the request is served).
constexpr size_t kMaxBatchPrompts = 256;

// One prompt: text, or token ids (a completion's token prompt; then `tokens` is non-empty).
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
};

struct ApiRequest {
  Route route = Route::kGenerate;
  // generate: one; completion: one, or a batch (a list of strings or of token-id lists).
  std::vector<PromptInput> prompts;
  std::vector<ChatMessage> messages;   // chat
  SamplingParams params;
  bool max_tokens_given = false;  // false: chat runs to the context end (capped by the limit)
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  // /v1/completions: the answer's text starts with the prompt, and with logprobs the prompt's
  // tokens are scored too (GenerationRequest::prompt_logprobs); max_tokens may then be 0.
  bool echo = false;
  // Choices to generate (OpenAI's n, completions and chat; /generate: 1), each its own engine
  // request sampling with seed + its index.
  int n = 1;
  // false: the request named no seed, and the server draws one for it (fresh_seed), so repeated
  // requests sample differently, as OpenAI's API does; params.seed then holds the CLI's default.
  bool seed_given = false;
  std::string model;
  std::string cache_salt;
};

// A seed for a request that named none: random per call (thread-safe).
uint64_t fresh_seed();

// Parses and validates `body`. Errors are invalid_argument with a client-facing message.
Expected<ApiRequest> parse_api_request(const std::string& body, Route route, const ApiLimits& limits);

// The max_tokens a request runs with once its prompt length is known, or a 400 message when
// prompt + max_tokens does not fit in the context (with limits.truncate_prompt: when max_tokens
// leaves no room for one prompt token besides the BOS; a chat without max_tokens whose prompt
// fills the context then gets min(context / 2, max_tokens_limit)).
Expected<int> resolve_max_tokens(const ApiRequest& req, int64_t prompt_tokens, int64_t context_length,
                                 const ApiLimits& limits);

}  // namespace kvserve::server
