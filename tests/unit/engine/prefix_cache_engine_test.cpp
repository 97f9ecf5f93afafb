// The engine with the prefix cache on (stories260K): a hit changes nothing in the output
// (token for token equal to --prefix-cache off), reports cached_tokens, respects cache_salt,
// and pin/unpin/flush do what the admin API promises.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "kvserve/engine.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;

constexpr int kBlock = 16;  // EngineConfig's default block size

const char* kShared =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. Her friend "
    "Tom came and said";
const char* kSuffixes[] = {" hello to her.", " that the ball was his.", " they should play together.",
                           " it was time to go home.", " he was sad."};

EngineConfig config(bool prefix_cache) {
  EngineConfig c;
  c.model_path = std::string(KVS_SHARED_DIR) + "/models/stories260K.gguf";
  c.threads = 1;
  c.prefix_cache = prefix_cache;
  return c;
}

std::unique_ptr<Engine> make(const EngineConfig& c) {
  auto e = Engine::create(c);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

RequestResult run(Engine& e, const std::vector<int32_t>& prompt, const std::string& salt = "", int n = 24) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = n;
  r.cache_salt = salt;
  auto h = e.submit(std::move(r));
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  return h.ok() ? (*h)->wait() : RequestResult{};
}

std::vector<int32_t> tokens(Engine& e, const std::string& text) { return e.tokenize(text, true, false); }

// What a repeated prompt of n tokens can hit: whole blocks, leaving the last token to compute.
int64_t expected_hit(size_t n) { return int64_t((n - 1) / kBlock) * kBlock; }

TEST(PrefixCacheEngine, SharedPrefixHitsAndOutputsEqualCacheOff) {
  auto on = make(config(true));
  auto off = make(config(false));
  ASSERT_TRUE(on && off);
  const std::vector<int32_t> shared = tokens(*on, kShared);
  ASSERT_GT(shared.size(), size_t(3 * kBlock));
  bool first = true;
  for (const char* suffix : kSuffixes) {
    const std::vector<int32_t> p = tokens(*on, std::string(kShared) + suffix);
    const RequestResult a = run(*on, p);
    const RequestResult b = run(*off, p);
    EXPECT_EQ(a.tokens, b.tokens) << suffix;
    EXPECT_EQ(a.text, b.text) << suffix;
    EXPECT_EQ(b.cached_tokens, 0);
    EXPECT_EQ(a.cached_tokens % kBlock, 0);
    if (first) {
      EXPECT_EQ(a.cached_tokens, 0);
    } else {
      // At least every full block of the shared text (its last block may differ by the suffix's
      // first token merging with it, hence - kBlock).
      EXPECT_GE(a.cached_tokens, int64_t(shared.size() / kBlock - 1) * kBlock) << suffix;
    }
    first = false;
  }
  const EngineStats s = on->stats();
  EXPECT_TRUE(s.prefix.enabled);
  EXPECT_GT(s.prefix.hit_tokens_total, 0);
  EXPECT_GE(s.prefix.query_tokens_total, s.prefix.hit_tokens_total);
  EXPECT_GT(s.prefix.blocks_cached, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);  // cached blocks are not in use
}

TEST(PrefixCacheEngine, RepeatsEndingOnABlockBoundaryAndShortPromptsAreExact) {
  auto on = make(config(true));
  auto off = make(config(false));
  ASSERT_TRUE(on && off);
  const std::vector<int32_t> all = tokens(*on, kShared);
  // Prompts of exactly 1, 2 and 3 blocks, one block + 1, and shorter than a block.
  for (size_t n : {size_t(kBlock), size_t(2 * kBlock), size_t(3 * kBlock), size_t(kBlock + 1), size_t(5)}) {
    const std::vector<int32_t> p(all.begin(), all.begin() + long(n));
    const RequestResult ref = run(*off, p);
    const RequestResult cold = run(*on, p, "boundary-" + std::to_string(n));
    const RequestResult warm = run(*on, p, "boundary-" + std::to_string(n));
    EXPECT_EQ(cold.tokens, ref.tokens) << n;
    EXPECT_EQ(warm.tokens, ref.tokens) << n;
    EXPECT_EQ(cold.cached_tokens, 0) << n;
    EXPECT_EQ(warm.cached_tokens, expected_hit(n)) << n;
  }
}

TEST(PrefixCacheEngine, TenantsWithDifferentSaltsNeverShare) {
  auto e = make(config(true));
  ASSERT_TRUE(e);
  const std::vector<int32_t> p = tokens(*e, kShared);
  EXPECT_EQ(run(*e, p, "tenant-a").cached_tokens, 0);
  EXPECT_EQ(run(*e, p, "tenant-b").cached_tokens, 0);
  EXPECT_EQ(run(*e, p).cached_tokens, 0);  // no salt is a namespace of its own
  EXPECT_EQ(run(*e, p, "tenant-a").cached_tokens, expected_hit(p.size()));
  EXPECT_EQ(run(*e, p, "tenant-b").cached_tokens, expected_hit(p.size()));
}

TEST(PrefixCacheEngine, ConcurrentRequestsWithTheSamePrefixAgreeWithCacheOff) {
  auto on = make(config(true));
  auto off = make(config(false));
  ASSERT_TRUE(on && off);
  std::vector<std::vector<int32_t>> prompts;
  for (const char* suffix : kSuffixes) prompts.push_back(tokens(*on, std::string(kShared) + suffix));
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt = p;
    r.params.temperature = 0;
    r.params.max_tokens = 24;
    auto h = on->submit(std::move(r));
    ASSERT_TRUE(h.ok());
    hs.push_back(*h);
  }
  int64_t cached = 0;
  for (size_t i = 0; i < hs.size(); ++i) {
    const RequestResult a = hs[i]->wait();
    EXPECT_EQ(a.tokens, run(*off, prompts[i]).tokens) << i;
    cached += a.cached_tokens;
  }
  // Arriving together, the later ones wait for the first one's blocks instead of computing them.
  EXPECT_GT(cached, 0);
}

TEST(PrefixCacheEngine, PinKeepsAPrefixThroughEvictionAndFlush) {
  EngineConfig c = config(true);
  // stories260K: 1280 bytes per token (f32), so 24 blocks of 16 tokens; pins may take half,
  // which leaves a 192-token context's 12 blocks unpinned.
  c.kv_memory = std::to_string(24 * kBlock * 1280);
  c.ctx = 12 * kBlock;
  c.cache_pin_fraction = 0.5;
  auto e = make(c);
  ASSERT_TRUE(e);
  const std::vector<int32_t> p = tokens(*e, kShared);
  auto pinned = e->pin_prefix(p, "", 10s);
  ASSERT_TRUE(pinned.ok()) << pinned.status().to_string();
  EXPECT_EQ(*pinned, int64_t(p.size() / kBlock) * kBlock);
  EXPECT_EQ(e->stats().prefix.blocks_pinned, *pinned / kBlock);
  // Churn through unrelated prompts that need the whole unpinned pool, several times over.
  for (int i = 0; i < 6; ++i)
    run(*e, tokens(*e, "The dog number " + std::to_string(i) + " ran to the big tree and barked at the cat."), "", 60);
  EXPECT_GT(e->stats().prefix.evictions_total, 0);
  auto flushed = e->flush_prefix_cache(5s);
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(e->stats().prefix.blocks_cached, 0);
  EXPECT_EQ(run(*e, p).cached_tokens, expected_hit(p.size()));  // the pinned blocks survived both
  auto unpinned = e->unpin_prefix(p, "", 5s);
  ASSERT_TRUE(unpinned.ok());
  EXPECT_EQ(*unpinned, *pinned);
  EXPECT_EQ(e->stats().prefix.blocks_pinned, 0);
  ASSERT_TRUE(e->flush_prefix_cache(5s).ok());
  EXPECT_EQ(run(*e, p).cached_tokens, 0);
}

TEST(PrefixCacheEngine, PinsBeyondTheCapAreRefused) {
  EngineConfig c = config(true);
  c.kv_memory = std::to_string(24 * kBlock * 1280);
  c.cache_pin_fraction = 0.1;  // 2 blocks
  auto e = make(c);
  ASSERT_TRUE(e);
  auto r = e->pin_prefix(tokens(*e, kShared), "", 10s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory) << r.status().to_string();
  EXPECT_EQ(e->stats().prefix.blocks_pinned, 0);
}

// Pinned blocks cannot be evicted, so pins that left fewer unpinned blocks than a full-context
// sequence needs kept a request that fits the context waiting forever at the head of the queue
// (and every request behind it). Pins now stop where a full-context sequence still fits.
TEST(PrefixCacheEngine, PinsNeverStarveARequestThatFitsTheContext) {
  EngineConfig c = config(true);
  c.kv_memory = std::to_string(24 * kBlock * 1280);  // 24 blocks
  c.ctx = 16 * kBlock;                               // a full sequence needs 16
  c.cache_pin_fraction = 1.0;
  auto e = make(c);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->stats().prefix.blocks_pinned_cap, 8);
  // Pin distinct prompts (2 blocks each) until the cap refuses one.
  int refused = 0;
  for (int i = 0; i < 12 && refused == 0; ++i) {
    const std::string text =
        std::to_string(i) + " The cat sat on the mat and looked at the big red ball in the sun all day.";
    auto r = e->pin_prefix(tokens(*e, text), "", 10s);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory) << r.status().to_string();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 1);
  EXPECT_LE(e->stats().prefix.blocks_pinned, 8);
  EXPECT_GE(e->stats().prefix.blocks_pinned, 7);
  // A request of the whole context: a long prompt and max_tokens up to the context end. It must
  // finish (behind it, a short one too), not wait for blocks that pins hold.
  std::vector<int32_t> longp = tokens(*e, kShared);
  while (longp.size() < size_t(12 * kBlock)) longp.push_back(longp[1 + longp.size() % 40]);
  GenerationRequest big;
  big.prompt = longp;
  big.params.temperature = 0;
  big.params.max_tokens = int(16 * kBlock - longp.size());
  big.params.ignore_eos = true;
  auto hb = e->submit(std::move(big));
  ASSERT_TRUE(hb.ok()) << hb.status().to_string();
  GenerationRequest small;
  small.prompt = tokens(*e, "Once upon a time");
  small.params.temperature = 0;
  small.params.max_tokens = 4;
  auto hs = e->submit(std::move(small));
  ASSERT_TRUE(hs.ok()) << hs.status().to_string();
  StreamDelta d;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!(*hs)->finished() && std::chrono::steady_clock::now() < deadline) (*hs)->next(&d, 100ms);
  while (!(*hb)->finished() && std::chrono::steady_clock::now() < deadline) (*hb)->next(&d, 100ms);
  const bool done = (*hb)->finished() && (*hs)->finished();
  (*hb)->cancel();  // no effect once finished
  (*hs)->cancel();
  ASSERT_TRUE(done) << "starved behind the pins";
  EXPECT_EQ((*hb)->wait().finish_reason, "length");
  EXPECT_EQ((*hb)->wait().tokens.size(), size_t(16 * kBlock) - longp.size());
  EXPECT_EQ((*hs)->wait().tokens.size(), 4u);
}

TEST(PrefixCacheEngine, OffMeansNoHitsAndNoAdmin) {
  auto e = make(config(false));
  ASSERT_TRUE(e);
  const std::vector<int32_t> p = tokens(*e, kShared);
  run(*e, p);
  EXPECT_EQ(run(*e, p).cached_tokens, 0);
  EXPECT_FALSE(e->stats().prefix.enabled);
  EXPECT_EQ(e->pin_prefix(p, "", 5s).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(e->flush_prefix_cache(5s).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace kvserve
