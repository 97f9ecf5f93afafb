// `kvserve bench --server URL`: a load generator for a running kvserve (or any OpenAI-style)
// server. It drives POST /v1/completions (or /v1/chat/completions for --turns) with
// stream: true and stream_options.include_usage, so it can time the first token and every
// later chunk and read the server's token counts (usage, incl. prompt_tokens_details.cached_tokens).
//
// Workloads (prompts are deterministic: words drawn from a fixed list by a seeded generator):
//   sweep          every request a distinct prompt of `prompt_words` words; per concurrency
//                  level, `requests` requests by `concurrency` client threads;
//   shared prefix  every request = the same `shared_prefix_words` words + a distinct suffix of
//                  `suffix_words` words (the prefix-cache benchmark);
//   turns          `concurrency` conversations of `turns` chat turns each; turn t sends the
//                  previous turns' user messages and replies plus a new user message.
// Per level it reports generated tok/s, requests/s, TTFT and inter-chunk latency p50/p99,
// the cached-token share, errors (and TTFT per turn for --turns).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace kvserve::loadgen {

struct LoadGenOptions {
  std::string url;                         // "http://127.0.0.1:8080"
  std::vector<int> concurrency{1, 4, 8, 16};
  int requests = 0;                        // per level; 0: 4 x concurrency, at least 8 (turns: conversations = concurrency)
  int prompt_words = 100;                  // sweep prompt / turns user-message length
  int gen_tokens = 64;                     // max_tokens (ignore_eos, so exactly this many unless the context ends)
  int shared_prefix_words = 0;             // > 0: shared-prefix workload
  int suffix_words = 20;
  int turns = 0;                           // > 0: multi-turn chat workload
  uint64_t seed = 1;
  double timeout_seconds = 600;            // per request
  std::string model;                       // the "model" field; "" leaves it out
  std::string api_key;                     // sent as "Authorization: Bearer KEY"; "" sends none
};

// One request as the client saw it.
struct RequestSample {
  bool ok = false;
  std::string error;            // HTTP status / transport error / an error event
  double ttft = 0;              // seconds from sending to the first chunk with text
  double total = 0;             // seconds from sending to [DONE]
  std::vector<double> gaps;     // seconds between consecutive chunks with text
  int64_t prompt_tokens = 0;    // from the usage chunk
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  std::string text;             // the generated text
  double last_text_at = -1;     // time of the latest chunk with text (apply_event's state)
};

struct Summary {
  double p50 = 0, p99 = 0, mean = 0;
  int64_t count = 0;
};

struct TurnReport {
  int turn = 0;  // 1-based
  int requests = 0, errors = 0;
  Summary ttft;
  double cached_share = 0;  // cached / prompt tokens of this turn's requests
};

struct LevelReport {
  int concurrency = 0;
  int requests = 0, errors = 0;
  double wall_seconds = 0;
  double gen_tok_per_s = 0;   // completion tokens of successful requests / wall time
  double req_per_s = 0;
  Summary ttft, itl;          // seconds
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double cached_share = 0;    // cached_tokens / prompt_tokens
  std::string first_error;
  std::vector<TurnReport> turns;  // --turns only
};

struct LoadReport {
  std::string mode;  // "sweep", "shared_prefix", "turns"
  LoadGenOptions options;
  std::vector<LevelReport> levels;
};

// ---- pieces, exposed for tests ----

// `n` words from the fixed list, chosen by (seed, stream): the same arguments give the same
// words; different streams give (practically) different word sequences.
std::string make_words(uint64_t seed, uint64_t stream, int n);

// Nearest-rank-interpolated percentile q in [0, 1] of `v` (0 when empty), plus the mean.
Summary summarize(std::vector<double> v);
double percentile(std::vector<double> v, double q);

// Splits an SSE byte stream into the payloads of its "data:" lines (any chunking of the bytes).
class SseParser {
 public:
  explicit SseParser(std::function<void(const std::string&)> on_data) : on_data_(std::move(on_data)) {}
  void feed(const char* data, size_t n);

 private:
  std::function<void(const std::string&)> on_data_;
  std::string line_;
};

// Folds one event payload into `s` at time `t` (seconds since sending): text timing, usage,
// error events. Returns true for "[DONE]".
bool apply_event(const std::string& payload, double t, RequestSample* s);

// Request bodies.
nlohmann::json completion_body(const LoadGenOptions& o, const std::string& prompt);
nlohmann::json chat_body(const LoadGenOptions& o, const nlohmann::json& messages);

// ---- running ----

// Sends one streamed request and times it. `path` is /v1/completions or /v1/chat/completions.
RequestSample run_one(const std::string& url, const std::string& path, const nlohmann::json& body, double timeout_seconds,
                      const std::string& api_key = "");

// Runs the workload the options select over every concurrency level. invalid_argument for bad
// options (empty URL, no levels, non-positive sizes).
Expected<LoadReport> run_load(const LoadGenOptions& o);

nlohmann::json report_json(const LoadReport& r);
std::string report_table(const LoadReport& r);

}  // namespace kvserve::loadgen
