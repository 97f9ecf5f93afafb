// GenerationRequest::prompt_logprobs on stories260K: every prompt token after the first is scored
// from the logits of the position before it, equal to the log-softmax of Generator::eval_all's
// rows, whether the prompt runs in one chunk or many, next to other requests, after a
// prefix-cache hit would have been possible, or through preemptions.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "common/stories_engine.h"
#include "engine/generator.h"
#include "kvserve/engine.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;
using test::make_engine;
using test::stories_config;
using test::wait_for_blocks_released;

const char* kPrompts[] = {"Once upon a time, there was a little girl named Lily. She loved to play outside",
                          "One day, a little boy named Tim went to the park with his mom",
                          "The sun was shining and the birds were singing. Lily",
                          "Max had a red ball. He liked to"};

// Reference scores: log-softmax of the model's logits at every position, from the Generator.
struct Reference {
  std::vector<int32_t> prompt;
  std::vector<float> logprob;                 // [prompt - 1]: token p + 1's
  std::vector<std::vector<int32_t>> top_ids;  // [prompt - 1][2]: the two likeliest
  std::vector<int32_t> greedy;                // greedy continuation of gen_tokens
};

std::vector<Reference> references(int n, int gen_tokens = 6) {
  auto gen = test::stories_generator();
  if (!gen) return {};
  std::vector<Reference> out;
  for (int i = 0; i < n; ++i) {
    Reference r;
    r.prompt = gen->tokenizer().encode(kPrompts[i], true, false);
    auto all = gen->eval_all(r.prompt);
    EXPECT_TRUE(all.ok());
    const size_t nv = all->size() / r.prompt.size();
    for (size_t p = 0; p + 1 < r.prompt.size(); ++p) {
      const float* row = all->data() + p * nv;
      double mx = row[0], sum = 0;
      for (size_t v = 0; v < nv; ++v) mx = std::max(mx, double(row[v]));
      for (size_t v = 0; v < nv; ++v) sum += std::exp(double(row[v]) - mx);
      r.logprob.push_back(float(double(row[r.prompt[p + 1]]) - mx - std::log(sum)));
      std::vector<int32_t> ids(nv);
      for (size_t v = 0; v < nv; ++v) ids[v] = int32_t(v);
      std::partial_sort(ids.begin(), ids.begin() + 2, ids.end(),
                        [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
      r.top_ids.push_back({ids[0], ids[1]});
    }
    SamplingParams g;
    g.temperature = 0;
    g.max_tokens = gen_tokens;
    auto res = gen->generate(r.prompt, g);
    EXPECT_TRUE(res.ok());
    r.greedy = res->tokens;
    out.push_back(std::move(r));
  }
  return out;
}

GenerationRequest scoring_request(const Reference& r, int max_tokens) {
  GenerationRequest g;
  g.prompt = r.prompt;
  g.params.temperature = 0;
  g.params.max_tokens = max_tokens;
  g.prompt_logprobs = true;
  g.top_logprobs = 2;
  return g;
}

// Drains a handle: the prompt scores (from the one delta that carries them) and the result.
struct Scored {
  std::vector<TokenLogprob> prompt;
  int deltas_with_scores = 0;
  RequestResult result;
};

Scored drain(RequestHandle& h) {
  Scored s;
  StreamDelta d;
  for (;;) {
    if (h.next(&d, 1000ms)) {
      if (!d.prompt_logprobs.empty()) {
        ++s.deltas_with_scores;
        s.prompt = d.prompt_logprobs;
      }
    } else if (h.finished()) {
      break;
    }
  }
  s.result = h.result();
  return s;
}

void expect_scores(const Reference& ref, const Scored& s) {
  EXPECT_EQ(s.deltas_with_scores, 1);
  ASSERT_EQ(s.prompt.size(), ref.prompt.size() - 1);
  for (size_t p = 0; p < s.prompt.size(); ++p) {
    EXPECT_EQ(s.prompt[p].token, ref.prompt[p + 1]) << p;
    EXPECT_NEAR(s.prompt[p].logprob, ref.logprob[p], 1e-4) << p;
    ASSERT_EQ(s.prompt[p].top.size(), 2u) << p;
    EXPECT_EQ(s.prompt[p].top[0].first, ref.top_ids[p][0]) << p;
    EXPECT_GE(s.prompt[p].top[0].second, s.prompt[p].top[1].second) << p;
  }
}

TEST(PromptLogprobs, ScoresOnlyWithZeroMaxTokens) {
  const auto refs = references(1);
  auto e = make_engine(stories_config());
  ASSERT_TRUE(e);
  auto h = e->submit(scoring_request(refs[0], 0));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  Scored s = drain(**h);
  expect_scores(refs[0], s);
  EXPECT_EQ(s.result.finish_reason, "length");
  EXPECT_TRUE(s.result.tokens.empty());
  wait_for_blocks_released(*e);
}

TEST(PromptLogprobs, ChunkedPrefillNextToOthersAndThenGenerates) {
  const auto refs = references(4);
  EngineConfig c = stories_config();
  c.max_batched_tokens = 7;  // every prompt runs in several chunks, beside the others' decodes
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const Reference& r : refs) {
    auto h = e->submit(scoring_request(r, 6));
    ASSERT_TRUE(h.ok());
    hs.push_back(*h);
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    Scored s = drain(*hs[i]);
    expect_scores(refs[i], s);
    EXPECT_EQ(s.result.tokens, refs[i].greedy) << "prompt " << i;  // generation unchanged
  }
  wait_for_blocks_released(*e);
}

TEST(PromptLogprobs, CachedPrefixIsScoredInFull) {
  const auto refs = references(1);
  auto e = make_engine(stories_config());
  ASSERT_TRUE(e);
  GenerationRequest warm;
  warm.prompt = refs[0].prompt;
  warm.params.temperature = 0;
  warm.params.max_tokens = 1;
  ASSERT_TRUE(e->submit(warm).value()->wait().finish_reason == "length");
  // The same prompt again would hit the cache; a scoring request runs it all.
  auto again = e->submit(warm);
  ASSERT_TRUE(again.ok());
  EXPECT_GT((*again)->wait().cached_tokens, 0);
  auto h = e->submit(scoring_request(refs[0], 2));
  ASSERT_TRUE(h.ok());
  Scored s = drain(**h);
  expect_scores(refs[0], s);
  EXPECT_EQ(s.result.cached_tokens, 0);
  wait_for_blocks_released(*e);
}

TEST(PromptLogprobs, PreemptionsKeepScoresAndTokensExact) {
  const auto refs = references(4, 40);
  EngineConfig c = stories_config();
  // stories260K: 1280 bytes of f32 K/V per token; each request grows to 4-5 blocks of 16
  // (15-26 prompt tokens + 40), 8 blocks hold two, so the four preempt one another.
  c.kv_memory = std::to_string(8 * 16 * 1280);
  c.ctx = 96;
  c.max_batched_tokens = 8;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const Reference& r : refs) hs.push_back(e->submit(scoring_request(r, 40)).value());
  for (size_t i = 0; i < refs.size(); ++i) {
    Scored s = drain(*hs[i]);
    expect_scores(refs[i], s);
    EXPECT_EQ(s.result.tokens, refs[i].greedy) << "prompt " << i;
  }
  EXPECT_GT(e->stats().preemptions_total, 0);
  wait_for_blocks_released(*e);
}

TEST(PromptLogprobs, OneTokenPromptHasNoScores) {
  auto e = make_engine(stories_config());
  ASSERT_TRUE(e);
  GenerationRequest g;
  g.prompt = {1};
  g.params.temperature = 0;
  g.params.max_tokens = 3;
  g.prompt_logprobs = true;
  auto h = e->submit(g);
  ASSERT_TRUE(h.ok());
  Scored s = drain(**h);
  EXPECT_TRUE(s.prompt.empty());
  EXPECT_EQ(s.result.tokens.size(), 3u);
  g.params.max_tokens = 0;
  EXPECT_EQ(e->submit(g).value()->wait().finish_reason, "length");
}

}  // namespace
}  // namespace kvserve
