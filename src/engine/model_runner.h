// ModelRunner: turns a ScheduleOutput into one batched ForwardPass::run over the paged KV
// cache, and holds the per-row helpers the engine needs on the resulting logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_storage.h"
#include "kvserve/request.h"
#include "model/forward.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "util/thread_pool.h"

namespace kvserve {

class ModelRunner {
 public:
  // window: the sliding attention window every chunk runs with (0: none).
  ModelRunner(const Model& model, KvStorage& kv, int threads, int64_t window = 0);

  // Runs every chunk of `out` in one forward pass. On success `logits` holds one row of
  // n_vocab floats per chunk, in chunk order ([out.chunks.size()][n_vocab]); rows of chunks
  // without `sample` are computed but unused. The chunks' slots must already be reserved in
  // `cache` (Scheduler::schedule does). An error leaves the KV cache contents untouched.
  // all_logits (empty, or one flag per chunk): a flagged chunk gets num_tokens rows (one per
  // position, the last being the one to sample from) instead of one; rows stay in chunk order.
  Status run(const ScheduleOutput& out, const Scheduler& scheduler, const KvCacheManager& cache,
             std::vector<float>* logits, const std::vector<uint8_t>& all_logits = {});

  int n_vocab() const { return n_vocab_; }

  // Carries out a context shift's plan on the KV memory (model/kv_shift.h); `table` is the
  // sequence's block table after the shift. Call before the next run().
  void apply_shift(const KvShiftPlan& plan, std::span<const int32_t> table);

 private:
  const Model& model_;
  KvStorage& kv_;
  int64_t window_;
  int n_vocab_;
  ThreadPool pool_;
  ForwardPass forward_;
  ForwardBatch batch_;  // reused between steps: tokens [sum of chunk sizes], chunks [num chunks]
};

// Log-probability of `token` and the `top_n` most likely tokens under log-softmax(logits).
// Uses the raw logits (before penalties, temperature and truncation), as the API reports.
TokenLogprob token_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace kvserve
