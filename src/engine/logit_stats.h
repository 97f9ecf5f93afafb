// Comparing next-token distributions: log-softmax and the KL divergence the KV-quantization
// accuracy report uses (`kvserve perplexity --kl-base`).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve {

// out[i] = logits[i] - log(sum_j exp(logits[j])), computed in double around the max so that
// extreme logits neither overflow nor lose the small probabilities. out.size() == logits.size().
void log_softmax(std::span<const float> logits, std::span<float> out);

// KL(P || Q) = sum_i p_i (log p_i - log q_i) for log-probability rows of one position, P the
// reference. >= 0 up to rounding; 0 when the rows are equal.
double kl_divergence(std::span<const float> log_p, std::span<const float> log_q);

// Mean, max and top-1 agreement of per-position KL divergences, accumulated row by row.
class KlAccumulator {
 public:
  void add(std::span<const float> log_p, std::span<const float> log_q);
  int64_t count() const { return count_; }
  double mean() const { return count_ ? sum_ / double(count_) : 0.0; }
  double max() const { return max_; }
  // Positions where both rows have the same most likely token, as a fraction.
  double top1_agreement() const { return count_ ? double(same_top1_) / double(count_) : 0.0; }

 private:
  int64_t count_ = 0;
  int64_t same_top1_ = 0;
  double sum_ = 0;
  double max_ = 0;
};

}  // namespace kvserve
