// The request-level types shared by the engine and its callers (the HTTP server, tests):
// what a client asks for, what streams back while it runs, and how it ended.
//
// Threading: a RequestHandle is written by the engine thread and read by one caller thread
// (typically the HTTP handler). Every public method is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvserve/sampling_params.h"

namespace kvserve {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS already in place; must not be empty
  SamplingParams params;
  bool logprobs = false;        // report the log-probability of every generated token
  int top_logprobs = 0;         // and of this many most likely alternatives (0..20)
  // Report the log-probability of every prompt token after the first (each given the tokens
  // before it; with top_logprobs alternatives), in the request's first delta. The prompt then
  // runs in full, without prefix-cache hits, and max_tokens may be 0 (score the prompt only).
  bool prompt_logprobs = false;
  std::string cache_salt;       // tenant namespace for prefix-cache sharing
  double timeout_seconds = 0;   // wall time from submit(); 0: no limit
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;                              // log-softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;     // most likely first, top_logprobs entries
};

// What became available since the previous delta. `text` is valid UTF-8 that can no longer be
// part of a stop string, so it may lag `tokens` by a few tokens (and the text of tokens that
// form a stop string never appears).
struct StreamDelta {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // one per token when GenerationRequest::logprobs
  // GenerationRequest::prompt_logprobs, in the first delta only: entry i is prompt token i + 1.
  std::vector<TokenLogprob> prompt_logprobs;
};

struct RequestResult {
  // "stop" (EOS or a stop string), "length" (max_tokens or the context end), "cancelled",
  // "timeout", "error" (see `error`).
  std::string finish_reason;
  std::string error;
  std::vector<int32_t> tokens;  // every generated token
  std::string text;             // the whole generated text, stop string excluded
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;    // prompt tokens served from the prefix cache
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;      // times this request was preempted and recomputed
  int64_t context_shifts = 0;   // times its context was shifted (context_overflow shift)
  double queue_seconds = 0;     // submit() until its first token was scheduled
  double ttft_seconds = 0;      // submit() until the first generated token
  double total_seconds = 0;     // submit() until finished
  std::vector<double> inter_token_seconds;  // gaps between consecutive generated tokens
};

class RequestHandle {
 public:
  explicit RequestHandle(uint64_t id) : id_(id) {}
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;

  uint64_t id() const { return id_; }

  // Waits up to `wait` for output. Returns true with *out filled (all pending output merged
  // into one delta) when there was any; false when the request has finished and everything
  // was read (result() is then final) or when `wait` expired (check finished()).
  bool next(StreamDelta* out, std::chrono::milliseconds wait);
  // True once the engine has finished the request (pending deltas may still be unread).
  bool finished() const;
  // Blocks until finished, then returns the result.
  RequestResult wait() const;
  // The result so far; final once finished().
  RequestResult result() const;
  // Asks the engine to stop: the sequence is freed within one engine step and the request
  // finishes with "cancelled" (no effect once finished). Safe to call from any thread.
  void cancel();
  bool cancel_requested() const;

 private:
  friend class RequestHandleWriter;  // the engine side (src/engine/request_queue.h)

  const uint64_t id_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<StreamDelta> pending_;  // written by the engine, drained by next()
  RequestResult result_;
  bool finished_ = false;
  bool cancel_ = false;
};

}  // namespace kvserve
