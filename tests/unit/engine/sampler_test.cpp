#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>

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

// The survivors by definition: sort by logit, keep top_k, softmax at the temperature, cut the
// smallest prefix with mass >= top_p, keep p >= min_p * p_max.
std::set<int32_t> survivors_by_definition(const std::vector<float>& l, const SamplingParams& p) {
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b);
  });
  if (p.top_k > 0 && size_t(p.top_k) < ids.size()) ids.resize(size_t(p.top_k));
  std::vector<double> pr;
  double sum = 0;
  for (int32_t id : ids)
    pr.push_back(std::exp((l[size_t(id)] - l[size_t(ids[0])]) / p.temperature)), sum += pr.back();
  for (double& x : pr) x /= sum;
  size_t keep = ids.size();
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (keep = 0; keep < ids.size() && cum < p.top_p;) cum += pr[keep++];
  }
  std::set<int32_t> out;
  for (size_t i = 0; i < keep; ++i)
    if (i == 0 || pr[i] >= p.min_p * pr[0]) out.insert(ids[i]);
  return out;
}

// Without a full sort (top-k by selection, the top-p nucleus by halving selections, min-p by a
// partition) the sampler still draws from exactly the survivors the definition names, peaked or
// flat logits over 5,000 tokens; where they are at most 20, every one of them is drawn.
TEST(Sampler, DrawsOnlyFromTheDefinedSurvivors) {
  std::mt19937 rng(11);
  for (float spread : {0.3f, 4.0f}) {
    std::normal_distribution<float> dist(0.0f, spread);
    std::vector<float> l(5000);
    for (float& x : l) x = dist(rng);
    for (const auto& [k, top_p, min_p] :
         {std::tuple{0, 0.5f, 0.0f}, std::tuple{0, 0.95f, 0.0f}, std::tuple{0, 1.0f, 0.2f},
          std::tuple{100, 0.7f, 0.0f}, std::tuple{0, 0.9f, 0.05f}, std::tuple{40, 1.0f, 0.0f}}) {
      SamplingParams p;
      p.temperature = 0.8f;
      p.top_k = k;
      p.top_p = top_p;
      p.min_p = min_p;
      p.seed = 5;
      const std::set<int32_t> allowed = survivors_by_definition(l, p);
      Sampler s(p);
      std::map<int32_t, int> seen;
      for (int i = 0; i < 3000; ++i) {
        const int32_t t = s.sample(l, {});
        ASSERT_TRUE(allowed.count(t)) << "token " << t << " (k " << k << ", top_p " << top_p << ", min_p "
                                      << min_p << ", spread " << spread << ")";
        ++seen[t];
      }
      if (allowed.size() <= 20) {
        EXPECT_EQ(seen.size(), allowed.size()) << spread << " " << top_p;
      }
    }
  }
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

// NaN or infinite sampling values (which CLI flags can carry) and a repeat_penalty <= 0 are
// refused by name; negative temperatures, top_k and the like keep their documented meanings.
TEST(Sampler, CheckSamplingValues) {
  SamplingParams p;
  EXPECT_TRUE(check_sampling_values(p).ok());
  p.temperature = -1.0f;  // greedy
  p.top_p = 5.0f;         // off
  p.min_p = -1.0f;        // off
  EXPECT_TRUE(check_sampling_values(p).ok());
  const float bad[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  const std::pair<const char*, float SamplingParams::*> fields[] = {
      {"temperature", &SamplingParams::temperature},
      {"top_p", &SamplingParams::top_p},
      {"min_p", &SamplingParams::min_p},
      {"repeat_penalty", &SamplingParams::repeat_penalty},
      {"presence_penalty", &SamplingParams::presence_penalty},
      {"frequency_penalty", &SamplingParams::frequency_penalty}};
  for (const auto& [name, field] : fields)
    for (float v : bad) {
      SamplingParams q;
      q.*field = v;
      const Status st = check_sampling_values(q);
      ASSERT_FALSE(st.ok()) << name << " " << v;
      EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
    }
  for (float v : {0.0f, -1.0f}) {
    SamplingParams q;
    q.repeat_penalty = v;
    EXPECT_FALSE(check_sampling_values(q).ok()) << v;
  }
}

// A toy vocabulary for the JSON mask: piece i is token i's bytes; token 9 is excluded (as an
// end-of-generation token is).
ConstraintVocab toy_vocab() {
  std::vector<uint8_t> excluded(10, 0);
  excluded[9] = 1;
  return ConstraintVocab::from_pieces({"x", "{", "}", "\"k\"", ":", "1", " ", "\"", "{\"a\":", "</s>"},
                                      excluded);
}

// Whatever the logits prefer, a constrained sampler only ever picks tokens that continue one JSON
// object, and says when it has closed; unconstrained, the same logits give the favourite.
TEST(Sampler, JsonObjectMasksTokensThatCannotContinue) {
  const ConstraintVocab vocab = toy_vocab();
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.json_object = true;
    p.seed = 7;
    Sampler s(p, &vocab);
    // "x" (which only a string may hold) and the excluded token are the favourites.
    std::vector<float> l = {9.0f, 1.0f, 0.5f, 2.0f, 2.0f, 2.0f, 0.0f, 1.5f, 3.0f, 10.0f};
    std::string text;
    int steps = 0;
    while (!s.constraint_complete() && steps < 200) {
      const int32_t tok = s.sample(l, {});
      ASSERT_GE(tok, 0);
      ASSERT_NE(tok, 9);
      text += vocab.pieces[size_t(tok)];
      ++steps;
      // As the text grows, favour closing quotes and braces over opening more objects.
      l[2] += 0.5f, l[7] += 0.5f, l[8] -= 1.0f;
    }
    EXPECT_TRUE(s.constraint_complete()) << text;
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
    EXPECT_LT(steps, 200);
  }
  SamplingParams free;
  free.temperature = 0;
  Sampler unconstrained(free, &vocab);  // json_object off: the vocabulary is not used
  EXPECT_EQ(unconstrained.sample(
                std::vector<float>{9.0f, 1.0f, 0.5f, 2.0f, 2.0f, 2.0f, 0.0f, 1.5f, 3.0f, 10.0f}, {}),
            9);
  EXPECT_FALSE(unconstrained.constraint_complete());
}

// A model with more output rows than tokenizer tokens (a padded vocabulary): the rows past the
// tokenizer's are never chosen under the constraint, however high their logits.
TEST(Sampler, JsonObjectNeverPicksRowsPastTheTokenizer) {
  const ConstraintVocab vocab = toy_vocab();  // 10 tokens
  SamplingParams p;
  p.temperature = 0;
  p.json_object = true;
  Sampler s(p, &vocab);
  std::vector<float> l(12, 0.0f);
  l[10] = l[11] = 50.0f;
  l[1] = 1.0f;  // "{"
  EXPECT_EQ(s.sample(l, {}), 1);
}

// A ban (logit_bias -100) on every token the constraint allows gives way; a vocabulary with no
// allowed token at all gives kNoToken.
TEST(Sampler, JsonObjectOutranksBansAndReportsDeadEnds) {
  const ConstraintVocab vocab = toy_vocab();
  SamplingParams p;
  p.temperature = 0;
  p.json_object = true;
  p.logit_bias = {{1, -100.0f}, {6, -100.0f}, {8, -100.0f}};  // every opening token
  Sampler s(p, &vocab);
  const std::vector<float> l(vocab.pieces.size(), 0.0f);
  const int32_t tok = s.sample(l, {});
  EXPECT_TRUE(tok == 1 || tok == 6 || tok == 8) << tok;

  const ConstraintVocab dead = ConstraintVocab::from_pieces({"x", "]"}, {0, 0});
  Sampler d(p, &dead);
  EXPECT_EQ(d.sample(std::vector<float>{1.0f, 2.0f}, {}), Sampler::kNoToken);
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
