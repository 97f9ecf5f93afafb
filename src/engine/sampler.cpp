#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

namespace kvserve {

uint64_t Rng::next_u64() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::next_unit() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

// The candidates' order: higher logit first, ties to the lower id (so every choice is
// deterministic).
bool Sampler::outranks(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

Sampler::Sampler(const SamplingParams& params, const ConstraintVocab* vocab)
    : params_(params), rng_(params.seed) {
  if (params.json_object && vocab != nullptr) json_.emplace(*vocab);
}

void Sampler::apply_penalties(std::span<const int32_t> history) {
  const auto& p = params_;
  if (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  size_t n = history.size();
  size_t window = p.repeat_last_n < 0 ? n : std::min(n, size_t(p.repeat_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = n - window; i < n; ++i) ++counts[history[i]];
  for (const auto& [id, count] : counts) {
    if (id < 0 || size_t(id) >= cand_.size()) continue;
    float& l = cand_[size_t(id)].logit;
    if (p.repeat_penalty != 1.0f) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= float(count) * p.frequency_penalty + p.presence_penalty;
  }
}

Status check_logit_bias(const SamplingParams& params, int32_t n_vocab) {
  if (params.logit_bias.size() > kMaxLogitBiasTokens)
    return invalid_argument("logit_bias: at most " + std::to_string(kMaxLogitBiasTokens) + " tokens, got " +
                            std::to_string(params.logit_bias.size()));
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || id >= n_vocab)
      return invalid_argument("logit_bias: token " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(n_vocab) + " tokens");
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      return invalid_argument("logit_bias: the bias of token " + std::to_string(id) +
                              " must be in [-100, 100]");
  }
  return Status::ok_status();
}

Status check_sampling_values(const SamplingParams& params) {
  const std::pair<const char*, float> values[] = {{"temperature", params.temperature},
                                                  {"top_p", params.top_p},
                                                  {"min_p", params.min_p},
                                                  {"repeat_penalty", params.repeat_penalty},
                                                  {"presence_penalty", params.presence_penalty},
                                                  {"frequency_penalty", params.frequency_penalty}};
  for (const auto& [name, v] : values)
    if (!std::isfinite(v))
      return invalid_argument(std::string(name) + " must be a finite number, got " + std::to_string(v));
  if (!(params.repeat_penalty > 0))
    return invalid_argument("repeat_penalty must be > 0, got " + std::to_string(params.repeat_penalty));
  return Status::ok_status();
}

void Sampler::apply_logit_bias() {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || size_t(id) >= cand_.size()) continue;
    float& l = cand_[size_t(id)].logit;
    l = bias <= -kMaxLogitBias ? -std::numeric_limits<float>::infinity() : l + bias;
  }
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  auto penalized = [&] {
    cand_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {int32_t(i), logits[i], 0.0f};
    apply_penalties(history);
  };
  penalized();
  if (!params_.logit_bias.empty()) {
    apply_logit_bias();
    // Every token banned: the bans cannot all hold, so they are dropped for this step.
    if (std::all_of(cand_.begin(), cand_.end(),
                    [](const Candidate& c) { return std::isinf(c.logit) && c.logit < 0; }))
      penalized();
  }
  if (json_ && !apply_constraint()) return kNoToken;
  const int32_t tok = choose();
  if (json_) json_->accept(tok);
  return tok;
}

bool Sampler::apply_constraint() {
  if (!json_->allowed(&allowed_)) return false;
  // A model may have more output rows than its tokenizer has tokens (padded vocabularies, as
  // Qwen2's 151,936 rows for 151,665 tokens): rows past the tokenizer's are never allowed.
  allowed_.resize(cand_.size(), 0);
  bool any = false;
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (allowed_[i] == 0) {
      cand_[i].logit = -std::numeric_limits<float>::infinity();
    } else {
      any = any || !std::isinf(cand_[i].logit);
    }
  }
  // Every allowed token banned by logit_bias: the bans give way, the constraint does not.
  if (!any) {
    for (size_t i = 0; i < cand_.size(); ++i)
      if (allowed_[i] != 0 && std::isinf(cand_[i].logit)) cand_[i].logit = -1e30f;
  }
  return true;
}

// The top-p nucleus among cand_[0, n): the fewest most probable candidates (outranks order, which
// is p's) whose mass reaches top_p, moved to the front; returns their count. Sorted candidates are
// cut at once; otherwise a selection halves the range that holds the cut until it is small enough
// to sort, so O(n) where sorting everything was O(n log n), and the kept set is the same set
// (its order, which only maps the draw to a token, differs).
size_t Sampler::nucleus(size_t n, bool sorted) {
  const auto at = [&](size_t i) { return cand_.begin() + std::ptrdiff_t(i); };
  double above = 0;  // the mass of cand_[0, lo), every one of them in the nucleus
  size_t lo = 0, hi = n;
  while (!sorted && hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(at(lo), at(mid), at(hi), outranks);  // [lo, mid) outrank [mid, hi)
    double m = 0;
    for (size_t i = lo; i < mid; ++i) m += cand_[i].p;
    if (above + m >= params_.top_p) {
      hi = mid;  // the cut is within [lo, mid)
    } else {
      above += m;
      lo = mid;
    }
  }
  if (!sorted) std::sort(at(lo), at(hi), outranks);
  size_t keep = lo;
  while (keep < hi && above < params_.top_p) above += cand_[keep++].p;
  return std::max<size_t>(keep, 1);
}

int32_t Sampler::choose() {
  if (params_.temperature <= 0.0f) {
    // Greedy; ties go to the lowest id so the choice is deterministic.
    return std::min_element(cand_.begin(), cand_.end(), outranks)->id;
  }
  // No step sorts the whole vocabulary (a 32k-entry sort took ~2 ms per token, as long as the
  // model's step): top-k selects its k, top-p selects its nucleus (nucleus()), and otherwise the
  // candidates keep their order. Survivors are cand_[0, n); `sorted` says they are in outranks
  // order. Banned and masked tokens (-inf) are never survivors, not even the draw's fallback.
  const auto is_out = [](const Candidate& c) { return std::isinf(c.logit) && c.logit < 0; };
  size_t n = cand_.size();
  bool sorted = false;
  if (params_.top_k > 0 && size_t(params_.top_k) < n) {
    n = size_t(params_.top_k);
    std::nth_element(cand_.begin(), cand_.begin() + std::ptrdiff_t(n - 1), cand_.end(), outranks);
    std::sort(cand_.begin(), cand_.begin() + std::ptrdiff_t(n), outranks);
    sorted = true;
    while (n > 1 && is_out(cand_[n - 1])) --n;
  } else {
    // At least one candidate is finite (the sampler's callers see to it).
    n = size_t(std::partition(cand_.begin(), cand_.end(), [&](const Candidate& c) { return !is_out(c); }) -
               cand_.begin());
    n = std::max<size_t>(n, 1);
  }
  const auto head = cand_.begin();
  const auto end = head + std::ptrdiff_t(n);
  // Softmax at the temperature over the survivors.
  const float max_logit = sorted ? cand_[0].logit : std::min_element(head, end, outranks)->logit;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].p = std::exp((cand_[i].logit - max_logit) / params_.temperature);
    sum += cand_[i].p;
  }
  for (size_t i = 0; i < n; ++i) cand_[i].p = float(cand_[i].p / sum);

  if (params_.top_p < 1.0f) n = nucleus(n, sorted);
  if (params_.min_p > 0.0f) {
    // Keep the tokens with p >= min_p * p_max (the most probable one always).
    const float p_max = sorted ? cand_[0].p : std::min_element(head, head + std::ptrdiff_t(n), outranks)->p;
    const float threshold = params_.min_p * p_max;
    if (sorted) {
      size_t keep = 1;
      while (keep < n && cand_[keep].p >= threshold) ++keep;
      n = keep;
    } else {
      n = size_t(std::partition(head, head + std::ptrdiff_t(n),
                                [&](const Candidate& c) { return c.p >= threshold; }) -
                 head);
      n = std::max<size_t>(n, 1);
    }
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].p;
  double r = rng_.next_unit() * total;
  size_t last = 0;  // the last candidate with mass: the fallback should rounding leave r >= 0
  for (size_t i = 0; i < n; ++i) {
    if (cand_[i].p <= 0) continue;
    last = i;
    r -= cand_[i].p;
    if (r < 0) return cand_[i].id;
  }
  return cand_[last].id;
}

}  // namespace kvserve
