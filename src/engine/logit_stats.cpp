#include "engine/logit_stats.h"

#include <algorithm>
#include <cmath>

#include "util/status.h"

namespace kvserve {

void log_softmax(std::span<const float> logits, std::span<float> out) {
  KVS_ASSERT(out.size() == logits.size() && !logits.empty(), "log_softmax sizes");
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  const double lse = double(mx) + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = float(double(logits[i]) - lse);
}

double kl_divergence(std::span<const float> log_p, std::span<const float> log_q) {
  KVS_ASSERT(log_p.size() == log_q.size(), "kl_divergence sizes");
  double kl = 0;
  for (size_t i = 0; i < log_p.size(); ++i) {
    const double lp = log_p[i];
    kl += std::exp(lp) * (lp - double(log_q[i]));
  }
  return std::max(kl, 0.0);  // tiny negative values are rounding
}

void KlAccumulator::add(std::span<const float> log_p, std::span<const float> log_q) {
  const double kl = kl_divergence(log_p, log_q);
  sum_ += kl;
  max_ = std::max(max_, kl);
  ++count_;
  const auto top_p = std::max_element(log_p.begin(), log_p.end()) - log_p.begin();
  const auto top_q = std::max_element(log_q.begin(), log_q.end()) - log_q.begin();
  if (top_p == top_q) ++same_top1_;
}

}  // namespace kvserve
