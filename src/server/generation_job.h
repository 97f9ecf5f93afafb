// One generation request of the HTTP API from submission to its last byte (routes_generate.cpp),
// and the JSON it answers with (generation_bodies.cpp). A request asks for `n` choices (OpenAI's
// `n`; 1 on /generate) of each of its prompts (a completion may batch several): each is its own
// engine request, with its own handle and output state; choice index = prompt * n + i.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api_request.h"
#include "server/api_response.h"
#include "server/server_state.h"

namespace kvserve::server {

struct Choice {
  std::shared_ptr<RequestHandle> handle;
  // Index of choice 0 of this choice's prompt: usage counts the prompt through that choice, and
  // for an echo with logprobs its engine request scores the prompt for all (once per prompt).
  size_t prompt_first = 0;
  // echo: the prompt text the choice starts with, its tokens, and whether the first token is a
  // BOS the server added (then it is not listed; else it is, with a null logprob).
  std::string echo_text;
  std::vector<int32_t> prompt;
  bool first_token_scored = false;
  std::vector<TokenLogprob> logprobs;         // collected for a non-streamed answer
  std::vector<TokenLogprob> prompt_logprobs;  // echo: the engine's scores of the prompt
  int64_t text_offset = 0;                    // characters streamed so far (completion logprobs)
  bool sent_role = false;                     // chat stream: the role went out in a first delta
  bool echo_sent = false;                     // stream: the echoed prompt went out
  bool closed = false;                        // stream: its last chunk (finish_reason) went out
};

struct Job {
  ServerState* st = nullptr;
  Route route = Route::kGenerate;
  ApiRequest api;
  std::string id;  // "cmpl-7" / "chatcmpl-7" / "gen-7"
  uint64_t server_id = 0;
  int64_t created = 0;
  std::vector<Choice> choices;
  bool done = false;
  bool logged = false;
  std::unique_ptr<InFlight> in_flight;
};

// Takes what a delta carries for a non-streamed answer (logprobs, prompt scores).
void collect_delta(Choice& c, StreamDelta& d);

// What the choices' results add up to for usage, timings and the access log: each prompt (and
// its cached part) once, the completion tokens of all, the earliest queue wait and first token,
// the latest end, the first choice's finish reason (and the first error of any).
RequestResult combined_result(const Job& job, const std::vector<RequestResult>& results);

// The whole non-streamed answer.
json full_body(const Job& job, const std::vector<RequestResult>& results);
// One streamed chunk of choice i carrying `text` (and its logprobs); `finish` non-empty on its last.
json chunk_body(Job& job, size_t i, const std::string& text, const std::vector<TokenLogprob>& lps,
                const std::string& finish);
// Choice i's last chunk (finish_reason; on /generate also usage, timings and the token count).
json last_chunk(Job& job, size_t i, const RequestResult& r);
// The stream's end once every choice has closed: the usage chunk when asked for, then [DONE].
std::string stream_tail(const Job& job, const RequestResult& combined);
// Choice i's echoed prompt as a chunk, its logprob entries with it when asked for.
json echo_chunk(Job& job, size_t i);

}  // namespace kvserve::server
