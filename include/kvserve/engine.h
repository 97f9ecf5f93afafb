// The serving engine: owns the model, tokenizer, KV cache and the one thread that runs the
// model. Callers submit token-level requests and read streamed output from RequestHandles.
// This header stays free of model/tokenizer types so the server depends only on
// include/kvserve/.
//
// Engine loop, one step: drain submitted requests into the scheduler → schedule (continuous
// batching, chunked prefill under max_batched_tokens, preemption by recompute when KV blocks
// run out) → one batched forward pass → sample one token per sequence whose prompt is done →
// detokenize, match stops, push deltas, finish and free.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/request.h"
#include "kvserve/sampling_params.h"
#include "util/status.h"

namespace kvserve {

struct PinOutcome;  // src/engine/request_queue.h

struct EngineConfig {
  std::string model_path;
  std::string kv_type = "f32";  // K and V element type: f32, f16, bf16, q8_0 or q4_0
  std::string kv_type_k;        // K element type; empty: kv_type
  std::string kv_type_v;        // V element type; empty: kv_type
  int block_size = 16;          // tokens per KV block
  std::string kv_memory;        // "512MiB" or a RAM fraction "0.6"; empty: enough for `ctx`
  int64_t ctx = 0;              // context length in tokens; 0: the model's training context
  bool use_cache = true;        // false: recompute every sequence from scratch each step
  int max_seqs = 16;            // sequences running at once
  int max_batched_tokens = 512; // tokens in one forward pass (decode + prefill chunks)
  int max_queue = 64;           // requests waiting to start; submit() fails beyond this
  int threads = 0;              // 0: one per core
  // prompt + max_tokens > ctx: "error" (refuse), "truncate" (drop the oldest prompt tokens) or
  // "shift" (StreamingLLM: at a full context keep n_keep sink tokens, drop half of the rest)
  std::string context_overflow = "error";
  int n_keep = 4;               // sink tokens a shift keeps at the start
  // Sliding attention window in tokens (0: the model's own GGUF sliding_window, else none).
  // Cannot be combined with context_overflow shift.
  int64_t attention_window = 0;
  bool prefix_cache = true;     // share full KV blocks between requests with the same prefix
  double cache_pin_fraction = 0.2;  // share of the KV blocks POST /cache/pin may hold, in [0, 1]
};

// The prefix cache as the engine thread last saw it (blocks are KV blocks of
// EngineStats::kv_block_bytes each; tokens are prompt tokens).
struct PrefixCacheInfo {
  bool enabled = false;
  int64_t blocks_cached = 0;   // unreferenced blocks kept for reuse (evictable)
  int64_t blocks_free = 0;     // empty blocks (never written or flushed/evicted)
  int64_t blocks_pinned = 0;   // held by POST /cache/pin
  int64_t blocks_pinned_cap = 0;  // most blocks pins may hold: cache_pin_fraction of the pool,
                                  // less what one full-context sequence needs
  int64_t evictions_total = 0; // cached blocks reused for other content
  int64_t query_tokens_total = 0;  // prompt tokens looked up at admission
  int64_t hit_tokens_total = 0;    // of which served from the cache
  int64_t recent_query_tokens = 0; // the same over the last 1,000 lookups
  int64_t recent_hit_tokens = 0;
};

struct EngineStats {
  int num_running = 0;   // sequences holding KV blocks
  int num_waiting = 0;   // submitted, not yet running (includes preempted ones)
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;   // referenced by a running sequence or a pin
  size_t kv_block_bytes = 0;
  size_t kv_bytes_total = 0;
  size_t kv_bytes_used = 0;
  int64_t prompt_tokens_total = 0;      // prompt tokens of requests that finished
  int64_t generation_tokens_total = 0;  // tokens generated, all requests
  int64_t preemptions_total = 0;
  int64_t context_shifts_total = 0;     // context shifts (context_overflow shift)
  int64_t requests_total = 0;           // accepted by submit()
  int64_t requests_finished = 0;
  int64_t steps_total = 0;              // engine steps that ran a forward pass
  bool loop_alive = false;
  PrefixCacheInfo prefix;
};

class Engine {
 public:
  // Loads the model and tokenizer, sizes the KV cache, starts the loop thread.
  static Expected<std::unique_ptr<Engine>> create(const EngineConfig& config);
  ~Engine();  // shutdown(0) if not done yet
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors: invalid_argument (empty prompt, a token out of the vocabulary,
  // bad sampling parameters, prompt + max_tokens beyond the context: the message states the
  // limit), out_of_memory ("queue full": max_queue requests waiting), unsupported after
  // shutdown started.
  Expected<std::shared_ptr<RequestHandle>> submit(GenerationRequest request);

  // Tokenizer access (thread-safe).
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  // A chat prompt: BOS as the model asks, control tokens parsed in the template's markup but not
  // in `content` (sorted, disjoint byte ranges [first, second): the messages' own text), so a
  // message cannot open or close a turn by writing "<|im_end|>".
  std::vector<int32_t> tokenize_chat(std::string_view text,
                                     std::span<const std::pair<uint32_t, uint32_t>> content) const;
  std::string detokenize(const std::vector<int32_t>& tokens) const;
  std::string token_to_piece(int32_t token) const;
  bool is_eog(int32_t token) const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;

  const std::string& model_name() const;  // general.name, else the file name
  int64_t context_length() const;
  int n_vocab() const;
  std::string chat_template() const;  // tokenizer.chat_template metadata, or ""
  const EngineConfig& config() const;

  EngineStats stats() const;

  // ---- prefix-cache administration (POST/DELETE /cache/pin, POST /cache/flush) ----
  // Runs `prompt` (one greedy token, queued like any request) so its full blocks are cached
  // under cache_salt's namespace, then pins them: they are never evicted until unpinned.
  // Returns the prompt tokens pinned (a whole number of blocks). out_of_memory when the pins
  // would exceed cache_pin_fraction of the pool; unsupported when prefix caching is off;
  // the submit() errors otherwise; deadline_exceeded-like invalid_argument after `timeout`.
  Expected<int64_t> pin_prefix(std::vector<int32_t> prompt, const std::string& cache_salt,
                               std::chrono::milliseconds timeout);
  // Removes one pin from each block of the prompt's cached prefix; returns the tokens unpinned
  // (0 when nothing was pinned).
  Expected<int64_t> unpin_prefix(std::vector<int32_t> prompt, const std::string& cache_salt,
                                 std::chrono::milliseconds timeout);
  // Removes every pin; returns the blocks that had one. (A pin made by a longer prompt keeps
  // its tail pinned when a shorter one is unpinned; this is the way to release everything.)
  Expected<int64_t> unpin_all(std::chrono::milliseconds timeout);
  // Drops every unreferenced, unpinned cached block; returns how many.
  Expected<int64_t> flush_prefix_cache(std::chrono::milliseconds timeout);
  // Lifetimes (seconds from commit to eviction) of blocks evicted since the last call, for the
  // block-lifetime histogram. Keeps at most 100,000 between calls (the oldest are dropped).
  std::vector<double> take_evicted_block_lifetimes();
  bool healthy() const;  // the loop thread is running and has not failed

  // Stops accepting requests, lets in-flight ones finish until `drain_deadline`, cancels the
  // rest, joins the loop thread. Idempotent.
  void shutdown(std::chrono::milliseconds drain_deadline);

  struct Impl;  // src/engine/engine.h

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  // submit(), and for pin_prefix() the outcome slot the engine fills after pinning.
  Expected<std::shared_ptr<RequestHandle>> submit_internal(GenerationRequest request, std::shared_ptr<PinOutcome> pin);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
