// Engine tests on stories260K: the batched, preempting engine produces exactly the tokens of
// the single-sequence Generator; cancel, timeout, queue limits, context limits and shutdown
// end requests cleanly and give every KV block back.
#include "kvserve/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "common/stories_engine.h"
#include "engine/generator.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;

using test::make_engine;
using test::wait_for_blocks_released;

const char* kPrompts[] = {"Once upon a time",
                          "One day, a little boy named Tim",
                          "The sun was shining and the birds were singing. Lily",
                          "Max had a red ball. He liked to",
                          "There was a big dog",
                          "Sue and her mom went to the park. They saw",
                          "The cat",
                          "A little bird could not fly, so"};

SamplingParams greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  return p;
}

EngineConfig base_config() { return test::stories_config(); }

// The reference: Generator's output for one prompt alone.
struct Solo {
  std::vector<int32_t> prompt;
  GenerationResult out;
};

std::vector<Solo> solo_outputs(int n_prompts, const SamplingParams& p) {
  auto gen = test::stories_generator();
  if (!gen) return {};
  std::vector<Solo> r;
  for (int i = 0; i < n_prompts; ++i) {
    Solo s;
    s.prompt = gen->tokenizer().encode(kPrompts[i], true, false);
    auto g = gen->generate(s.prompt, p);
    EXPECT_TRUE(g.ok());
    s.out = *g;
    r.push_back(std::move(s));
  }
  return r;
}

GenerationRequest request_for(const std::vector<int32_t>& prompt, const SamplingParams& p) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params = p;
  return r;
}

// Submits every prompt at once, then waits for all of them.
std::vector<RequestResult> run_concurrently(Engine& e, const std::vector<Solo>& solos, const SamplingParams& p) {
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const Solo& s : solos) {
    auto h = e.submit(request_for(s.prompt, p));
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (h.ok()) hs.push_back(*h);
  }
  std::vector<RequestResult> rs;
  for (auto& h : hs) rs.push_back(h->wait());
  return rs;
}

void expect_same(const std::vector<Solo>& solos, const std::vector<RequestResult>& rs) {
  ASSERT_EQ(solos.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].tokens, solos[i].out.tokens) << "prompt " << i;
    EXPECT_EQ(rs[i].text, solos[i].out.text) << "prompt " << i;
    EXPECT_EQ(rs[i].finish_reason, solos[i].out.finish_reason) << "prompt " << i;
    EXPECT_EQ(rs[i].prompt_tokens, int64_t(solos[i].prompt.size()));
  }
}

TEST(Engine, OneRequestEqualsGeneratorGreedy) {
  const SamplingParams p = greedy(100);
  const std::vector<Solo> solos = solo_outputs(4, p);
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  for (const Solo& s : solos) {
    auto h = e->submit(request_for(s.prompt, p));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    RequestResult r = (*h)->wait();
    EXPECT_EQ(r.tokens, s.out.tokens);
    EXPECT_EQ(r.text, s.out.text);
    EXPECT_EQ(r.generated_tokens, int64_t(r.tokens.size()));
    EXPECT_GE(r.total_seconds, r.ttft_seconds);
  }
  EXPECT_TRUE(e->healthy());
  wait_for_blocks_released(*e);
}

TEST(Engine, EightConcurrentRequestsEqualTheirSoloOutputs) {
  const SamplingParams p = greedy(80);
  const std::vector<Solo> solos = solo_outputs(8, p);
  EngineConfig c = base_config();
  c.max_batched_tokens = 24;  // forces chunked prefill next to decodes
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  expect_same(solos, run_concurrently(*e, solos, p));
  wait_for_blocks_released(*e);
}

TEST(Engine, TinyKvBudgetPreemptsAndStaysExact) {
  const SamplingParams p = greedy(60);
  const std::vector<Solo> solos = solo_outputs(6, p);
  EngineConfig c = base_config();
  // stories260K: 2 (K,V) x 5 layers x 4 kv heads x 8 dims x 4 bytes = 1280 bytes per token.
  // 10 blocks of 16 tokens hold two of these sequences (prompt + 60 tokens ~ 5 blocks each).
  c.kv_memory = std::to_string(10 * 16 * 1280);
  c.ctx = 160;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->stats().kv_blocks_total, 10);
  EXPECT_EQ(e->context_length(), 160);
  expect_same(solos, run_concurrently(*e, solos, p));
  EXPECT_GT(e->stats().preemptions_total, 0);
  wait_for_blocks_released(*e);
}

TEST(Engine, NoCacheModeGivesTheSameTokens) {
  const SamplingParams p = greedy(40);
  const std::vector<Solo> solos = solo_outputs(3, p);
  EngineConfig c = base_config();
  c.use_cache = false;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  expect_same(solos, run_concurrently(*e, solos, p));
}

TEST(Engine, StreamedDeltasAddUpToTheResult) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  GenerationRequest r = request_for(e->tokenize(kPrompts[0], true, false), greedy(50));
  r.logprobs = true;
  r.top_logprobs = 3;
  auto h = e->submit(r);
  ASSERT_TRUE(h.ok());
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> lps;
  StreamDelta d;
  for (;;) {
    if ((*h)->next(&d, 1000ms)) {
      text += d.text;
      tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
      lps.insert(lps.end(), d.logprobs.begin(), d.logprobs.end());
    } else if ((*h)->finished()) {
      break;
    }
  }
  RequestResult res = (*h)->result();
  EXPECT_EQ(res.finish_reason, "length");
  EXPECT_EQ(text, res.text);
  EXPECT_EQ(tokens, res.tokens);
  ASSERT_EQ(lps.size(), tokens.size());
  for (size_t i = 0; i < lps.size(); ++i) {
    EXPECT_EQ(lps[i].token, tokens[i]);
    EXPECT_LE(lps[i].logprob, 0.0f);
    ASSERT_EQ(lps[i].top.size(), 3u);
    EXPECT_EQ(lps[i].top[0].first, tokens[i]);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(lps[i].top[0].second, lps[i].logprob);
    EXPECT_GE(lps[i].top[0].second, lps[i].top[1].second);
  }
  EXPECT_EQ(res.inter_token_seconds.size(), tokens.size() - 1);
}

TEST(Engine, StopStringEndsLikeTheGenerator) {
  SamplingParams p = greedy(100);
  p.stop = {"Lily"};
  const std::vector<Solo> solos = solo_outputs(1, p);
  ASSERT_EQ(solos[0].out.finish_reason, "stop");
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  expect_same(solos, run_concurrently(*e, solos, p));
}

TEST(Engine, CancelFreesTheBlocks) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  SamplingParams p = greedy(1500);
  p.ignore_eos = true;
  auto h = e->submit(request_for(e->tokenize(kPrompts[1], true, false), p));
  ASSERT_TRUE(h.ok());
  StreamDelta d;
  while (!(*h)->next(&d, 1000ms) && !(*h)->finished()) {
  }
  (*h)->cancel();
  RequestResult r = (*h)->wait();
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_LT(r.generated_tokens, 1500);
  wait_for_blocks_released(*e);
  EXPECT_EQ(e->stats().num_running, 0);
}

TEST(Engine, QueueFullIsRefused) {
  EngineConfig c = base_config();
  c.max_seqs = 1;
  c.max_queue = 2;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  SamplingParams p = greedy(1000);
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = e->tokenize(kPrompts[0], true, false);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    auto h = e->submit(request_for(prompt, p));
    if (h.ok()) hs.push_back(*h);
    else refused = h.status();
  }
  EXPECT_EQ(refused.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(refused.message().find("queue full"), std::string::npos) << refused.message();
  for (auto& h : hs) h->cancel();
  for (auto& h : hs) EXPECT_EQ(h->wait().finish_reason, "cancelled");
  wait_for_blocks_released(*e);
}

TEST(Engine, PromptPlusMaxTokensBeyondContextIsRejected) {
  EngineConfig c = base_config();
  c.ctx = 64;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  auto h = e->submit(request_for(e->tokenize(kPrompts[0], true, false), greedy(60)));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("64"), std::string::npos) << h.status().message();
  GenerationRequest bad;
  EXPECT_EQ(e->submit(bad).status().code(), StatusCode::kInvalidArgument);  // empty prompt
  bad.prompt = {1, 100000};
  EXPECT_EQ(e->submit(bad).status().code(), StatusCode::kInvalidArgument);  // out of vocabulary
  bad.prompt = {1, 2};
  bad.params.temperature = std::nanf("");
  auto nan_temp = e->submit(bad);
  ASSERT_FALSE(nan_temp.ok());
  EXPECT_NE(nan_temp.status().message().find("temperature"), std::string::npos);
}

TEST(Engine, ContextEndFinishesWithLength) {
  EngineConfig c = base_config();
  c.ctx = 32;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  const std::vector<int32_t> prompt = e->tokenize(kPrompts[0], true, false);
  SamplingParams p = greedy(32 - int(prompt.size()));
  p.ignore_eos = true;
  auto h = e->submit(request_for(prompt, p));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  RequestResult r = (*h)->wait();
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.prompt_tokens + r.generated_tokens, 32);
  p.max_tokens += 1;
  EXPECT_EQ(e->submit(request_for(prompt, p)).status().code(), StatusCode::kInvalidArgument);
}

TEST(Engine, TimeoutEndsTheRequest) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  SamplingParams p = greedy(1500);
  p.ignore_eos = true;
  GenerationRequest r = request_for(e->tokenize(kPrompts[0], true, false), p);
  r.timeout_seconds = 1e-6;
  auto h = e->submit(r);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)->wait().finish_reason, "timeout");
  wait_for_blocks_released(*e);
}

TEST(Engine, ZeroMaxTokensAnswersAtOnce) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  auto h = e->submit(request_for(e->tokenize(kPrompts[0], true, false), greedy(0)));
  ASSERT_TRUE(h.ok());
  RequestResult r = (*h)->wait();
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_TRUE(r.tokens.empty());
}

TEST(Engine, ShutdownDrainsThenCancels) {
  {
    // Generous deadline: short requests all finish.
    auto e = make_engine(base_config());
    ASSERT_TRUE(e);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 4; ++i) {
      SamplingParams p = greedy(20);
      p.ignore_eos = true;
      auto h = e->submit(request_for(e->tokenize(kPrompts[i], true, false), p));
      ASSERT_TRUE(h.ok());
      hs.push_back(*h);
    }
    e->shutdown(10s);
    for (auto& h : hs) {
      ASSERT_TRUE(h->finished());
      EXPECT_EQ(h->result().finish_reason, "length");
    }
    EXPECT_FALSE(e->stats().loop_alive);
    EXPECT_FALSE(e->healthy());
    EXPECT_EQ(e->submit(request_for({1}, greedy(1))).status().code(), StatusCode::kUnsupported);
  }
  {
    // No deadline: long requests are cancelled, none is left hanging.
    auto e = make_engine(base_config());
    ASSERT_TRUE(e);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 4; ++i) {
      SamplingParams p = greedy(1800);
      p.ignore_eos = true;
      auto h = e->submit(request_for(e->tokenize(kPrompts[i], true, false), p));
      ASSERT_TRUE(h.ok());
      hs.push_back(*h);
    }
    e->shutdown(0ms);
    for (auto& h : hs) {
      ASSERT_TRUE(h->finished());
      const std::string reason = h->result().finish_reason;
      EXPECT_TRUE(reason == "cancelled" || reason == "length") << reason;
    }
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
    e->shutdown(0ms);  // idempotent
  }
}

TEST(Engine, MetadataIsExposed) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->n_vocab(), 512);
  EXPECT_EQ(e->context_length(), 2048);
  EXPECT_FALSE(e->model_name().empty());
  EXPECT_TRUE(e->is_eog(e->eos_id()));
  EXPECT_EQ(e->bos_id(), 1);
  std::vector<int32_t> ids = e->tokenize("Once upon a time", true, false);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_NE(e->detokenize(ids).find("Once upon a time"), std::string::npos);
  EngineStats s = e->stats();
  EXPECT_TRUE(s.loop_alive);
  EXPECT_EQ(s.kv_blocks_total, 128);
  EXPECT_EQ(s.kv_bytes_total, size_t(128) * 16 * 1280);
  EngineConfig bad = base_config();
  bad.max_seqs = 0;
  EXPECT_FALSE(Engine::create(bad).ok());
  bad = base_config();
  bad.kv_type = "q3";
  EXPECT_FALSE(Engine::create(bad).ok());
}

}  // namespace
}  // namespace kvserve
