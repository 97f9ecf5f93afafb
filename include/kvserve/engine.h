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
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/request.h"
#include "kvserve/sampling_params.h"
#include "util/status.h"

namespace kvserve {

struct EngineConfig {
  std::string model_path;
  std::string kv_type = "f32";  // "f32" or "f16"
  int block_size = 16;          // tokens per KV block
  std::string kv_memory;        // "512MiB" or a RAM fraction "0.6"; empty: enough for `ctx`
  int64_t ctx = 0;              // context length in tokens; 0: the model's training context
  bool use_cache = true;        // false: recompute every sequence from scratch each step
  int max_seqs = 16;            // sequences running at once
  int max_batched_tokens = 512; // tokens in one forward pass (decode + prefill chunks)
  int max_queue = 64;           // requests waiting to start; submit() fails beyond this
  int threads = 0;              // 0: one per core
};

struct EngineStats {
  int num_running = 0;   // sequences holding KV blocks
  int num_waiting = 0;   // submitted, not yet running (includes preempted ones)
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  size_t kv_bytes_total = 0;
  size_t kv_bytes_used = 0;
  int64_t prompt_tokens_total = 0;      // prompt tokens of requests that finished
  int64_t generation_tokens_total = 0;  // tokens generated, all requests
  int64_t preemptions_total = 0;
  int64_t requests_total = 0;           // accepted by submit()
  int64_t requests_finished = 0;
  int64_t steps_total = 0;              // engine steps that ran a forward pass
  bool loop_alive = false;
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
  bool healthy() const;  // the loop thread is running and has not failed

  // Stops accepting requests, lets in-flight ones finish until `drain_deadline`, cancels the
  // rest, joins the loop thread. Idempotent.
  void shutdown(std::chrono::milliseconds drain_deadline);

  struct Impl;  // src/engine/engine.h

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
