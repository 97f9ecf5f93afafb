#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace kvserve {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  auto l = logits_of({0.1f, 3.0f, -1.0f, 3.0f});
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 42;
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7) * 0.3f;
  Sampler a(p), b(p);
  std::vector<int32_t> da, db;
  for (int i = 0; i < 200; ++i) {
    da.push_back(a.sample(l, {}));
    db.push_back(b.sample(l, {}));
  }
  EXPECT_EQ(da, db);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> dc;
  for (int i = 0; i < 200; ++i) dc.push_back(c.sample(l, {}));
  EXPECT_NE(da, dc);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(p);
  auto l = logits_of({0.0f, 0.5f, 0.4f});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0;
  p.top_p = 0.5f;  // token 0 alone has p > 0.5
  Sampler s(p);
  auto l = logits_of({5.0f, 1.0f, 1.0f, 1.0f});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l, {}), 0);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // tokens 2,3 have p < 0.5 * p_max
  Sampler s(p);
  auto l = logits_of({2.0f, 2.0f, -3.0f, -3.0f});
  std::map<int32_t, int> seen;
  for (int i = 0; i < 400; ++i) seen[s.sample(l, {})]++;
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
  EXPECT_GT(seen[0], 100);
  EXPECT_GT(seen[1], 100);
}

TEST(Sampler, DistributionFollowsTemperature) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 7;
  Sampler s(p);
  auto l = logits_of({std::log(3.0f), 0.0f});  // p = 0.75 / 0.25
  int zeros = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) zeros += s.sample(l, {}) == 0;
  EXPECT_NEAR(double(zeros) / n, 0.75, 0.03);
}

TEST(Sampler, RepetitionPenaltyChangesGreedyChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  auto l = logits_of({2.0f, 1.5f});
  std::vector<int32_t> hist = {0};
  EXPECT_EQ(s.sample(l, hist), 1);  // 2.0 / 2 = 1.0 < 1.5
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 0.4f;
  q.frequency_penalty = 0.2f;
  Sampler s2(q);
  std::vector<int32_t> hist2 = {0, 0};  // 2.0 - 0.4 - 2*0.2 = 1.2 < 1.5
  EXPECT_EQ(s2.sample(l, hist2), 1);
  EXPECT_EQ(s2.sample(l, {}), 0);
}

TEST(Sampler, LogitBiasBansAndForcesTokens) {
  SamplingParams p;
  p.temperature = 0;
  const auto l = logits_of({0.1f, 3.0f, -1.0f, 2.0f});
  p.logit_bias = {{1, -100.0f}};  // a ban: the runner-up wins
  EXPECT_EQ(Sampler(p).sample(l, {}), 3);
  p.logit_bias = {{1, -0.5f}};  // a plain bias: 2.5 still beats 2.0
  EXPECT_EQ(Sampler(p).sample(l, {}), 1);
  p.logit_bias = {{1, -1.5f}};  // 1.5 loses to 2.0
  EXPECT_EQ(Sampler(p).sample(l, {}), 3);
  p.logit_bias = {{2, 100.0f}};  // forced
  EXPECT_EQ(Sampler(p).sample(l, {}), 2);
  // A banned token is never drawn, whatever the seed.
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.logit_bias = {{1, -100.0f}, {3, -100.0f}};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    const int32_t t = Sampler(p).sample(l, {});
    EXPECT_TRUE(t == 0 || t == 2) << t;
  }
  // Every token banned: the bans are dropped for the step (greedy on the model's logits).
  p.temperature = 0;
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}, {2, -100.0f}, {3, -100.0f}};
  EXPECT_EQ(Sampler(p).sample(l, {}), 1);
}

TEST(Sampler, CheckLogitBiasRanges) {
  SamplingParams p;
  p.logit_bias = {{0, -100.0f}, {511, 100.0f}};
  EXPECT_TRUE(check_logit_bias(p, 512).ok());
  p.logit_bias = {{512, 1.0f}};
  EXPECT_NE(check_logit_bias(p, 512).message().find("token 512"), std::string::npos);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(check_logit_bias(p, 512).ok());
  p.logit_bias = {{3, 100.5f}};
  EXPECT_FALSE(check_logit_bias(p, 512).ok());
  p.logit_bias = {{3, std::nanf("")}};
  EXPECT_FALSE(check_logit_bias(p, 512).ok());
  p.logit_bias.assign(kMaxLogitBiasTokens + 1, {0, 1.0f});
  EXPECT_FALSE(check_logit_bias(p, 512).ok());
}

TEST(StopMatcher, HoldsBackPartialStopAndCuts) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("hello E"), "hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X more"), "ENX more");
  EXPECT_EQ(m.push(" and EN"), " and ");
  EXPECT_EQ(m.push("D tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, NoStopsPassThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_FALSE(m.stopped());
  StopMatcher m2({"zz"});
  EXPECT_EQ(m2.push("abz"), "ab");
  EXPECT_EQ(m2.flush(), "z");
}

}  // namespace
}  // namespace kvserve
