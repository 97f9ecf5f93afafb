// Turns a row of logits into the next token: penalties, then greedy or
// top-k → temperature → top-p → min-p → a draw from a seeded generator.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/json_constraint.h"
#include "kvserve/sampling_params.h"
#include "util/status.h"

namespace kvserve {

// SplitMix64: tiny, fully specified, so the same seed gives the same draws on every platform
// (std:: distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double next_unit();  // uniform in [0, 1) with 53 bits

 private:
  uint64_t state_;
};

// invalid_argument naming the first logit_bias entry out of range: a token id outside
// [0, n_vocab), a bias outside [-kMaxLogitBias, kMaxLogitBias], or more than kMaxLogitBiasTokens.
Status check_logit_bias(const SamplingParams& params, int32_t n_vocab);
// invalid_argument naming the first float parameter that is not finite (a NaN temperature turns
// every probability into NaN; an infinite one makes a banned token's -inf logit NaN), or a
// repeat_penalty <= 0 (it divides logits). Other values have meanings (sampling_params.h).
Status check_sampling_values(const SamplingParams& params);

class Sampler {
 public:
  // vocab: what the JSON mask needs when params.json_object is set (nullptr: no constraint).
  explicit Sampler(const SamplingParams& params, const ConstraintVocab* vocab = nullptr);

  // The value sample() returns when a constraint leaves no token to choose, and the error that
  // ends such a generation.
  static constexpr int32_t kNoToken = -1;
  static constexpr const char* kNoTokenReason = "no token of the vocabulary can continue the JSON object";
  // history: the sequence's tokens so far (prompt and generated) for the penalties. Under a
  // constraint, only tokens that continue it are candidates, and the one chosen advances it.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The constraint (if any) is satisfied and nothing more may follow.
  bool constraint_complete() const { return json_ && json_->complete(); }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  static bool outranks(const Candidate& a, const Candidate& b);
  void apply_penalties(std::span<const int32_t> history);
  void apply_logit_bias();
  bool apply_constraint();  // false: no candidate is left
  int32_t choose();
  size_t nucleus(size_t n, bool sorted);

  SamplingParams params_;
  Rng rng_;
  std::vector<Candidate> cand_;  // [n_vocab] reused between calls
  std::optional<JsonConstraint> json_;
  std::vector<uint8_t> allowed_;  // [n_vocab] the constraint's mask, reused
};

}  // namespace kvserve
