// Engine::Impl: the state behind include/kvserve/engine.h. Everything below `queue` is owned
// by the loop thread (the only thread that runs the model or touches the KV cache); caller
// threads reach it only through `queue`, the atomics and the published stats snapshot.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/context_policy.h"
#include "engine/json_constraint.h"
#include "engine/model_fingerprint.h"
#include "engine/model_runner.h"
#include "engine/request_queue.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_storage.h"
#include "kvserve/engine.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// Per-request state the scheduler does not know about: sampling, text and timing.
struct ActiveRequest {
  // json_vocab: the engine's ConstraintVocab when the request asks for a JSON object.
  ActiveRequest(PendingRequest p, const Tokenizer& tok, const ConstraintVocab* json_vocab)
      : handle(std::move(p.handle)),
        request(std::move(p.request)),
        submitted(p.submitted),
        sampler(request.params, json_vocab),
        detok(tok),
        stops(request.params.stop),
        pin(std::move(p.pin)) {}

  std::shared_ptr<RequestHandle> handle;
  GenerationRequest request;
  SteadyTime submitted;
  SteadyTime last_token;
  bool scheduled = false;  // queue_seconds recorded
  Sampler sampler;
  StreamDetokenizer detok;
  StopMatcher stops;
  RequestResult result;
  std::shared_ptr<PinOutcome> pin;  // pin requests only
  BlockHash ns;                     // prefix-cache namespace ({} when prefix caching is off)
  // GenerationRequest::prompt_logprobs: entry p is prompt token p + 1's, filled as the prompt's
  // chunks run; complete once the chunk reaching the prompt's end has run; sent with the first
  // delta after that.
  std::vector<TokenLogprob> prompt_logprobs;
  bool prompt_logprobs_complete = false;
  bool prompt_logprobs_sent = false;
  // Whether this step's chunk of the sequence must return every position's logits.
  bool wants_all_logits(const ScheduledChunk& c) const {
    return request.prompt_logprobs && !prompt_logprobs_complete &&
           c.start_pos + 1 < int64_t(request.prompt.size());
  }
};

struct Engine::Impl {
  Impl(const EngineConfig& cfg, std::unique_ptr<Model> m, std::unique_ptr<Tokenizer> t, KvStorage storage,
       int64_t context, ContextOverflow overflow_policy, const ContextPlan& plan);

  // The loop thread body: admit → expire → schedule → run → postprocess, until shutdown.
  void loop();
  void admit_pending();
  void expire(SteadyTime now);
  void step();
  void postprocess(ActiveRequest& a, SeqId id, const float* row);
  // Scores the prompt tokens after chunk c's positions from its rows ([c.num_tokens][n_vocab]).
  void score_prompt(ActiveRequest& a, const ScheduledChunk& c, const float* rows);
  // Shifts a sequence whose context is full (context_overflow shift); false when it could not
  // (the request was then finished with "length").
  bool shift_context(ActiveRequest& a, SeqId id);
  // Ends a request: flushes held-back text, frees its sequence, publishes the result.
  void finish(SeqId id, const std::string& reason, const std::string& error = "");
  void publish_stats();
  // Moves the cache's evicted-block lifetimes to `evicted_lifetimes` for the metrics.
  void collect_lifetimes();

  const EngineConfig config;
  std::string model_name;
  std::string chat_template;
  const int64_t ctx;
  const int64_t window;             // sliding attention window (0: none)
  const ContextOverflow overflow;   // what happens at a full context
  const int64_t shift_keep;         // sink tokens one shift keeps (overflow == kShift)
  const int64_t shift_discard;      // tokens one shift drops (overflow == kShift)
  BlockHash fingerprint;     // model_fingerprint(*model), computed once at load
  std::string kv_signature;  // KV element types and block size, part of every namespace
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  // The JSON mask's view of the vocabulary, built on the first request that asks for JSON.
  std::unique_ptr<ConstraintVocab> json_vocab;
  const ConstraintVocab* json_vocab_for(const GenerationRequest& r);
  KvStorage kv;
  RequestQueue queue;

  // ---- loop thread only ----
  KvCacheManager cache;
  Scheduler scheduler;
  ModelRunner runner;
  std::unordered_map<SeqId, std::unique_ptr<ActiveRequest>> active;
  std::vector<float>
      logits;  // [rows][n_vocab] of the last step: one per chunk, num_tokens for all_logits ones
  std::vector<uint8_t> all_logits;  // per chunk of the last step: every position's logits wanted
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t requests_finished = 0;
  int64_t steps_total = 0;
  int64_t context_shifts_total = 0;

  // ---- shared ----
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> requests_total{0};
  std::atomic<size_t> num_waiting{0};  // scheduler's waiting count, for the queue limit
  std::atomic<bool> stopping{false};
  std::atomic<bool> loop_alive{false};
  std::atomic<int64_t> drain_deadline_ns{0};  // steady_clock time since epoch, set before `stopping`
  mutable std::mutex stats_mu;
  EngineStats stats_snapshot;  // guarded by stats_mu
  std::mutex lifetimes_mu;
  std::deque<double> evicted_lifetimes;  // guarded by lifetimes_mu; capped (see engine.h API)
  std::mutex shutdown_mu;
  std::thread thread;
};

}  // namespace kvserve
