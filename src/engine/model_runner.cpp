#include "engine/model_runner.h"

#include <algorithm>
#include <cmath>

#include "model/kv_shift.h"

namespace kvserve {

ModelRunner::ModelRunner(const Model& model, KvStorage& kv, int threads, int64_t window)
    : model_(model), kv_(kv), window_(window), n_vocab_(model.hparams().n_vocab), pool_(threads),
      forward_(model, kv, pool_) {}

void ModelRunner::apply_shift(const KvShiftPlan& plan, std::span<const int32_t> table) {
  apply_kv_shift(kv_, model_, plan, table, &pool_);
}

Status ModelRunner::run(const ScheduleOutput& out, const Scheduler& scheduler, const KvCacheManager& cache,
                        std::vector<float>* logits, const std::vector<uint8_t>& all_logits) {
  batch_.tokens.clear();
  batch_.chunks.clear();
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    const Sequence* s = scheduler.find(c.seq);
    if (s == nullptr) return internal_error("scheduled sequence " + std::to_string(c.seq) + " is unknown");
    if (c.num_tokens < 1 || c.start_pos < 0 || c.start_pos + c.num_tokens > s->num_tokens())
      return internal_error("chunk of sequence " + std::to_string(c.seq) + " lies outside its tokens");
    auto first = s->tokens.begin() + c.start_pos;
    batch_.tokens.insert(batch_.tokens.end(), first, first + c.num_tokens);
    SeqChunk sc;
    sc.start_pos = c.start_pos;
    sc.num_tokens = c.num_tokens;
    // The table stays valid through run(): nothing mutates the cache manager meanwhile.
    sc.block_table = cache.block_table(c.seq);
    sc.all_logits = i < all_logits.size() && all_logits[i] != 0;
    sc.window = window_;
    batch_.chunks.push_back(sc);
  }
  if (batch_.chunks.empty()) {
    logits->clear();
    return Status::ok_status();
  }
  return forward_.run(batch_, logits);
}

TokenLogprob token_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  TokenLogprob r;
  r.token = token;
  if (logits.empty()) return r;
  // log_softmax(x)_i = x_i - (max + log(sum exp(x - max))), in double for a stable sum.
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - double(mx));
  const double lse = double(mx) + std::log(sum);
  if (token >= 0 && size_t(token) < logits.size()) r.logprob = float(double(logits[size_t(token)]) - lse);
  const size_t n = std::min(size_t(std::max(top_n, 0)), logits.size());
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    // Highest logit first; ties by lower id so the order is deterministic.
    std::partial_sort(ids.begin(), ids.begin() + long(n), ids.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
    });
    r.top.reserve(n);
    for (size_t i = 0; i < n; ++i) r.top.emplace_back(ids[i], float(double(logits[size_t(ids[i])]) - lse));
  }
  return r;
}

}  // namespace kvserve
