// Single-process text generation over the paged KV cache: what the CLI commands `generate`,
// `logits` and `perplexity` run. It owns the model, tokenizer, KV storage and cache manager;
// the cache manager serves any number of sequences, and `generate` uses one.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/context_policy.h"
#include "engine/sampler.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_storage.h"
#include "kvserve/sampling_params.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace kvserve {

struct GeneratorOptions {
  std::string model_path;
  KvDType kv_type = KvDType::F32;  // K and V element type, unless overridden below
  std::optional<KvDType> kv_type_k;  // --kv-type-k
  std::optional<KvDType> kv_type_v;  // --kv-type-v
  int block_size = 16;
  std::string kv_memory;  // "512MiB" or a RAM fraction "0.6"; empty: size for `ctx` tokens
  int64_t ctx = 0;        // context length in tokens; 0: the model's training context
  bool use_cache = true;  // false: recompute the whole sequence at every step (--no-cache)
  int threads = 0;        // 0: one per core
  // At a full context: kError / kTruncate stop generating ("length"); kShift drops tokens after
  // the first n_keep ones (StreamingLLM) and goes on. eval_all() with kShift evaluates token
  // lists longer than the context the same way.
  ContextOverflow context_overflow = ContextOverflow::kError;
  int64_t n_keep = 4;
  int64_t attention_window = 0;  // 0: the model's GGUF sliding_window, else none
  // > 0 (and no kv_memory): the run never holds more than this many tokens (`generate` knows
  // its prompt and -n), so the arena holds that many rather than the whole context: a model with
  // a 128K context would otherwise zero-fill gigabytes of f32 K/V for a 20-token answer. The
  // context (context_length(), where generation stops) stays the model's or --ctx.
  int64_t max_tokens_held = 0;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids
  std::string text;             // generated text (after stop-string truncation)
  std::string finish_reason;    // "stop" (EOS or stop string) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  size_t kv_bytes_used = 0;     // KV bytes held at the end of generation
  size_t kv_bytes_peak = 0;     // most KV bytes held at any point
  int64_t context_shifts = 0;   // context shifts (kShift)
};

class Generator {
 public:
  static Expected<std::unique_ptr<Generator>> create(const GeneratorOptions& opts);

  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t context_length() const { return ctx_; }
  int64_t attention_window() const { return window_; }
  const KvStorage& kv_storage() const { return kv_; }

  // Generates after `prompt` (token ids, BOS already in place). `on_text` receives text pieces as
  // they become valid UTF-8 and cannot be part of a stop string; returning false stops early.
  Expected<GenerationResult> generate(const std::vector<int32_t>& prompt, const SamplingParams& params,
                                      const std::function<bool(const std::string&)>& on_text = {});

  // Logits after each prefix of `tokens`: [tokens.size()][n_vocab], computed in one prefill
  // (or token by token through the cache when `incremental` is true). More tokens than the
  // context only with kShift: they run in pieces, the context shifting whenever it is full.
  Expected<std::vector<float>> eval_all(const std::vector<int32_t>& tokens, bool incremental = false);

 private:
  Generator(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tok, KvStorage kv, int64_t ctx,
            const ContextPlan& plan, const GeneratorOptions& opts);
  // Shifts the context of the one sequence (kShift) and drops the same tokens from `tokens`.
  Status shift(std::vector<int32_t>& tokens);
  // Runs `n` tokens of seq 0 starting at `start` (which are already in the manager's table).
  Status run_chunk(const std::vector<int32_t>& tokens, int64_t start, int64_t n, bool all_logits,
                   std::vector<float>* logits);

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  // The JSON mask's view of the vocabulary, built on the first json_object call and kept.
  std::unique_ptr<ConstraintVocab> json_vocab_;
  KvStorage kv_;
  KvCacheManager cache_;
  ThreadPool pool_;
  ForwardPass forward_;
  int64_t ctx_;
  int64_t window_;   // sliding attention window (0: none)
  int64_t keep_;     // sink tokens one shift keeps (kShift)
  int64_t discard_;  // tokens one shift drops (kShift)
  GeneratorOptions opts_;
};

}  // namespace kvserve
