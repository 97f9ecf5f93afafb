// The engine with context_overflow shift and with a sliding attention window (stories260K):
// outputs equal the single-sequence Generator's under the same policy, token for token, alone,
// concurrently and with prefix-cache hits; KV memory stays within its bound while a request
// generates far past the context; bad combinations are refused at creation.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/greedy.h"
#include "engine/generator.h"
#include "kvserve/engine.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;

std::string model_path() { return std::string(KVS_SHARED_DIR) + "/models/stories260K.gguf"; }

using test::greedy_ignoring_eos;

std::unique_ptr<Generator> generator(int64_t ctx, ContextOverflow overflow, int64_t window) {
  GeneratorOptions o;
  o.model_path = model_path();
  o.threads = 1;
  o.ctx = ctx;
  o.context_overflow = overflow;
  o.attention_window = window;
  auto g = Generator::create(o);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(g).value() : nullptr;
}

std::unique_ptr<Engine> engine(int64_t ctx, const std::string& overflow, int64_t window, bool prefix = true,
                               const std::string& kv_memory = "") {
  EngineConfig c;
  c.model_path = model_path();
  c.threads = 1;
  c.ctx = ctx;
  c.context_overflow = overflow;
  c.attention_window = window;
  c.prefix_cache = prefix;
  c.kv_memory = kv_memory;
  auto e = Engine::create(c);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

GenerationRequest request(const std::vector<int32_t>& prompt, const SamplingParams& p) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params = p;
  return r;
}

// Waits for h while sampling the engine's used KV blocks; returns the result and the peak.
RequestResult wait_sampling(Engine& e, RequestHandle& h, int64_t* peak_blocks) {
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done.load()) {
      *peak_blocks = std::max(*peak_blocks, e.stats().kv_blocks_used);
      std::this_thread::sleep_for(200us);
    }
  });
  RequestResult r = h.wait();
  done = true;
  sampler.join();
  return r;
}

TEST(EngineShift, FiveThousandTokensAtContext2048InBoundedMemory) {
  auto gen = generator(2048, ContextOverflow::kShift, 0);
  ASSERT_TRUE(gen);
  const std::vector<int32_t> prompt = gen->tokenizer().encode("Once upon a time", true, false);
  auto want = gen->generate(prompt, greedy_ignoring_eos(5000));
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_EQ(want->tokens.size(), 5000u);
  EXPECT_GE(want->context_shifts, 3);
  // The generator's own bound: one full context of blocks, never more.
  EXPECT_LE(want->kv_bytes_peak, size_t(2048) * gen->kv_storage().layout().bytes_per_token());

  auto e = engine(2048, "shift", 0);
  ASSERT_TRUE(e);
  auto h = e->submit(request(prompt, greedy_ignoring_eos(5000)));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  int64_t peak = 0;
  const RequestResult r = wait_sampling(*e, **h, &peak);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.generated_tokens, 5000);
  EXPECT_EQ(r.tokens, want->tokens) << "the engine shifts exactly as the generator does";
  EXPECT_EQ(r.context_shifts, want->context_shifts);
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, 2048 / 16) << "KV memory above one context of blocks";
  EXPECT_EQ(e->stats().context_shifts_total, want->context_shifts);
}

TEST(EngineShift, ConcurrentAndSharedPrefixesShiftLikeSoloRuns) {
  auto gen = generator(128, ContextOverflow::kShift, 0);
  ASSERT_TRUE(gen);
  // The first two share 2 full blocks (the second hits them), and the block holding the kept
  // sink tokens is one of them: the second one's shift must copy it.
  const std::string shared =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog";
  const std::string texts[] = {shared, shared, "The cat sat on the mat and looked at the"};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> want;
  for (const std::string& t : texts) {
    prompts.push_back(gen->tokenizer().encode(t, true, false));
    auto g = gen->generate(prompts.back(), greedy_ignoring_eos(400));
    ASSERT_TRUE(g.ok());
    want.push_back(g->tokens);
  }
  for (bool prefix : {true, false}) {
    SCOPED_TRACE(prefix ? "prefix cache on" : "prefix cache off");
    // Room for both sequences and the cached blocks (stories260K: 1280 bytes per token).
    auto e = engine(128, "shift", 0, prefix, std::to_string(40 * 16 * 1280));
    ASSERT_TRUE(e);
    // The first runs alone so its blocks are cached; the other two start together, the second
    // one sharing the first one's prompt blocks (a shift must copy them, not rewrite them).
    auto first = e->submit(request(prompts[0], greedy_ignoring_eos(400)));
    ASSERT_TRUE(first.ok());
    EXPECT_EQ((*first)->wait().tokens, want[0]);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (size_t i = 1; i < prompts.size(); ++i) {
      auto h = e->submit(request(prompts[i], greedy_ignoring_eos(400)));
      ASSERT_TRUE(h.ok());
      hs.push_back(*h);
    }
    for (size_t i = 0; i < hs.size(); ++i) {
      const RequestResult r = hs[i]->wait();
      EXPECT_EQ(r.tokens, want[i + 1]) << "prompt " << i + 1;
      EXPECT_GT(r.context_shifts, 0);
      if (i == 0) {
        EXPECT_EQ(r.cached_tokens >= 32, prefix);
      }
    }
    for (int i = 0; i < 200 && e->stats().kv_blocks_used != 0; ++i) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
  }
}

TEST(EngineWindow, OutputsEqualTheGeneratorWithAndWithoutPrefixHits) {
  const int64_t window = 24;
  auto gen = generator(512, ContextOverflow::kError, window);
  ASSERT_TRUE(gen);
  const std::string shared = "Once upon a time, there was a little girl named Lily. She loved to play outside";
  const std::vector<std::string> texts = {shared, shared + " with her dog.", shared + " in the park."};
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) {
    auto g = gen->generate(gen->tokenizer().encode(t, true, false), greedy_ignoring_eos(150));
    ASSERT_TRUE(g.ok());
    want.push_back(g->tokens);
  }
  for (bool prefix : {true, false}) {
    SCOPED_TRACE(prefix ? "prefix cache on" : "prefix cache off");
    auto e = engine(512, "error", window, prefix);
    ASSERT_TRUE(e);
    int64_t hits = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      auto h = e->submit(request(gen->tokenizer().encode(texts[i], true, false), greedy_ignoring_eos(150)));
      ASSERT_TRUE(h.ok());
      int64_t peak = 0;
      const RequestResult r = wait_sampling(*e, **h, &peak);
      EXPECT_EQ(r.tokens, want[i]) << "prompt " << i;
      hits += r.cached_tokens;
      // O(window): the window, one prefill chunk of this short prompt, a partial block each end.
      EXPECT_LE(peak, (window + 32) / 16 + 2) << "prompt " << i;
    }
    EXPECT_EQ(hits > 0, prefix) << "later prompts hit the shared prefix's cached blocks";
  }
}

TEST(EngineWindow, ShiftWithAWindowOrWithoutRoomIsRefused) {
  EngineConfig c;
  c.model_path = model_path();
  c.context_overflow = "shift";
  c.attention_window = 64;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("window"), std::string::npos) << e.status().message();
  c.attention_window = 0;
  c.ctx = 32;
  c.n_keep = 4;  // (32 - 4) / 2 = 14 tokens: less than one block of 16
  e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("n_keep"), std::string::npos) << e.status().message();
  c.ctx = 64;
  c.n_keep = -1;
  EXPECT_FALSE(Engine::create(c).ok());
}

}  // namespace
}  // namespace kvserve
