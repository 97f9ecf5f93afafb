#include "engine/logit_stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvserve {
namespace {

std::vector<float> lsm(std::vector<float> logits) {
  std::vector<float> out(logits.size());
  log_softmax(logits, out);
  return out;
}

TEST(LogitStats, LogSoftmaxNormalisesAndSurvivesHugeLogits) {
  for (const auto& row : {std::vector<float>{1, 2, 3}, std::vector<float>{1000, 0, -1000}, std::vector<float>{-5}}) {
    const std::vector<float> lp = lsm(row);
    double sum = 0;
    for (float v : lp) sum += std::exp(double(v));
    EXPECT_NEAR(sum, 1.0, 1e-6);
    for (float v : lp) EXPECT_TRUE(std::isfinite(v));
  }
  const std::vector<float> lp = lsm({0, std::log(3.0f)});  // p = 1/4, 3/4
  EXPECT_NEAR(lp[0], std::log(0.25), 1e-6);
  EXPECT_NEAR(lp[1], std::log(0.75), 1e-6);
}

TEST(LogitStats, KlIsZeroForEqualRowsAndMatchesTheFormula) {
  const std::vector<float> p = lsm({0.5f, 1.5f, -2.0f});
  EXPECT_DOUBLE_EQ(kl_divergence(p, p), 0.0);
  // P = (1/2, 1/2), Q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const std::vector<float> a = lsm({0, 0}), b = lsm({0, std::log(3.0f)});
  EXPECT_NEAR(kl_divergence(a, b), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-6);
  EXPECT_GT(kl_divergence(b, a), 0.0);
}

TEST(LogitStats, AccumulatorReportsMeanMaxAndTop1) {
  KlAccumulator acc;
  const std::vector<float> a = lsm({0, 0.1f}), b = lsm({0.1f, 0}), c = lsm({0, 2});
  acc.add(a, a);  // same, KL 0
  acc.add(a, b);  // top-1 differs
  acc.add(a, c);  // same top-1, larger KL
  EXPECT_EQ(acc.count(), 3);
  EXPECT_NEAR(acc.mean(), (kl_divergence(a, b) + kl_divergence(a, c)) / 3, 1e-12);
  EXPECT_DOUBLE_EQ(acc.max(), kl_divergence(a, c));
  EXPECT_NEAR(acc.top1_agreement(), 2.0 / 3.0, 1e-12);
}

}  // namespace
}  // namespace kvserve
