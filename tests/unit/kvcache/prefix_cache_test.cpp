// KvCacheManager's prefix cache: hits (block boundaries, short prompts, namespaces), LRU
// eviction order, admission capacity, pinning and its cap, flush, stats, events, lifetimes,
// forced hash collisions and the switched-off mode. verify() runs after every mutation.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "common/token_lists.h"

namespace kvserve {
namespace {

using namespace ::kvserve::test_util;
using SeqId = KvCacheManager::SeqId;


#define EXPECT_VERIFIED(m)                           \
  do {                                               \
    Status _v = (m).verify();                        \
    EXPECT_TRUE(_v.ok()) << _v.to_string();          \
  } while (0)

// A whole request: admitted with its cached prefix (the last token always computed), every
// token computed, full blocks committed, then freed so its blocks stay cached.
void run_seq(KvCacheManager& m, SeqId id, const BlockHash& ns, const Toks& t) {
  const PrefixMatch pm = m.match_prefix(ns, t, int64_t(t.size()) - 1);
  ASSERT_TRUE(m.allocate(id, int64_t(t.size()), pm).ok());
  ASSERT_TRUE(m.commit(id, t).ok());
  ASSERT_TRUE(m.free(id).ok());
  EXPECT_VERIFIED(m);
}

// Starts a sequence sharing the longest cached prefix of t (leaving the last token) and keeps it.
PrefixMatch start_seq(KvCacheManager& m, SeqId id, const BlockHash& ns, const Toks& t) {
  const PrefixMatch pm = m.match_prefix(ns, t, int64_t(t.size()) - 1);
  Status st = m.allocate(id, int64_t(t.size()), pm);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(m.commit(id, t).ok());
  EXPECT_VERIFIED(m);
  return pm;
}

TEST(PrefixCache, HitEndingExactlyOnABlockBoundary) {
  KvCacheManager m(16, 4);
  const Toks a = iota_tokens(8, 100);  // exactly two blocks
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.index().size(), 2u);
  // All of it is cached, but the caller leaves the last token to compute: one block hits.
  EXPECT_EQ(m.match_prefix(kNs1, a, 7).num_tokens, 4);
  EXPECT_EQ(m.match_prefix(kNs1, a, 8).num_tokens, 8);
  // A longer prompt with the same 8 tokens first hits both blocks: the hit ends on a boundary.
  const Toks b = concat(a, {7});
  const PrefixMatch pm = start_seq(m, 2, kNs1, b);
  EXPECT_EQ(pm.num_tokens, 8);
  EXPECT_EQ(m.num_tokens(2), 9);
  EXPECT_EQ(m.block_table(2)[0], pm.blocks[0]);
  EXPECT_EQ(m.block_table(2)[1], pm.blocks[1]);
  EXPECT_EQ(m.pool().block(pm.blocks[0]).ref_count, 1);
}

TEST(PrefixCache, PromptShorterThanABlockNeverHits) {
  KvCacheManager m(8, 4);
  const Toks a = {1, 2, 3};
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.index().size(), 0u);
  EXPECT_EQ(m.match_prefix(kNs1, a, 3).num_tokens, 0);
  EXPECT_EQ(m.pool().num_blocks_cached(), 0);
  // Partial last blocks are never indexed either.
  run_seq(m, 2, kNs1, iota_tokens(6, 1));
  EXPECT_EQ(m.index().size(), 1u);
  EXPECT_EQ(m.match_prefix(kNs1, iota_tokens(6, 1), 6).num_tokens, 4);
}

TEST(PrefixCache, NamespacesNeverHitEachOther) {
  KvCacheManager m(16, 4);
  const Toks a = iota_tokens(9, 1);
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.match_prefix(kNs1, a, 8).num_tokens, 8);
  EXPECT_EQ(m.match_prefix(kNs2, a, 8).num_tokens, 0);
  EXPECT_EQ(m.match_prefix(BlockHash{}, a, 8).num_tokens, 0);
  // The same tokens under ns2 get their own blocks.
  run_seq(m, 2, kNs2, a);
  EXPECT_EQ(m.index().size(), 4u);
  const PrefixMatch p1 = m.match_prefix(kNs1, a, 8), p2 = m.match_prefix(kNs2, a, 8);
  ASSERT_EQ(p1.num_blocks(), 2);
  ASSERT_EQ(p2.num_blocks(), 2);
  EXPECT_NE(p1.blocks[0], p2.blocks[0]);
  EXPECT_NE(p1.blocks[1], p2.blocks[1]);
}

TEST(PrefixCache, SameBlockTokensUnderAnotherPrefixDoNotHit) {
  KvCacheManager m(16, 2);
  run_seq(m, 1, kNs1, {1, 2, 5, 6, 9});
  // Block 1 is {5, 6} in both, but its prefix differs: keys are chained.
  EXPECT_EQ(m.match_prefix(kNs1, Toks{3, 4, 5, 6, 9}, 4).num_tokens, 0);
  EXPECT_EQ(m.match_prefix(kNs1, Toks{1, 2, 5, 6, 9}, 4).num_tokens, 4);
}

TEST(PrefixCache, AllocationTakesPlainBlocksFirstThenEvictsTailBeforeHead) {
  KvCacheManager m(6, 2);
  const Toks a = {1, 2, 3, 4};  // two full blocks
  run_seq(m, 1, kNs1, a);
  const PrefixMatch cached = m.match_prefix(kNs1, a, 4);
  ASSERT_EQ(cached.num_blocks(), 2);
  EXPECT_EQ(m.pool().num_blocks_cached(), 2);
  // Four plain blocks are left: a 4-block sequence takes them and evicts nothing.
  ASSERT_TRUE(m.allocate(2, 8).ok());
  EXPECT_EQ(m.prefix_stats().evictions_total, 0);
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 4);
  // Now only cached blocks are free: the sequence's tail block goes first (released first).
  ASSERT_TRUE(m.allocate(3, 1).ok());
  EXPECT_EQ(m.prefix_stats().evictions_total, 1);
  EXPECT_EQ(m.block_table(3)[0], cached.blocks[1]);
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 2);  // the head survives
  ASSERT_TRUE(m.append_slots(3, 2).ok());
  EXPECT_EQ(m.block_table(3)[1], cached.blocks[0]);
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 0);
  EXPECT_EQ(m.prefix_stats().evictions_total, 2);
  EXPECT_VERIFIED(m);
}

TEST(PrefixCache, LeastRecentlyUsedIsEvictedFirst) {
  KvCacheManager m(4, 2);
  const Toks a = {1, 2, 3}, b = {4, 5, 6};
  run_seq(m, 1, kNs1, a);  // caches {1,2}
  run_seq(m, 2, kNs1, b);  // caches {4,5}, more recently
  // Reusing a's block makes it the most recently used.
  start_seq(m, 3, kNs1, a);
  ASSERT_TRUE(m.free(3).ok());
  // Two plain blocks, then b's block (LRU), then a's.
  ASSERT_TRUE(m.allocate(4, 6).ok());
  EXPECT_EQ(m.match_prefix(kNs1, b, 2).num_tokens, 0);
  EXPECT_EQ(m.match_prefix(kNs1, a, 2).num_tokens, 2);
  EXPECT_VERIFIED(m);
}

// The capacity check counts cached blocks as free but not the ones the new sequence reuses.
TEST(PrefixCache, CapacityExcludesTheBlocksAboutToBeReused) {
  KvCacheManager m(4, 2);
  const Toks a = {1, 2, 3, 4, 5, 6};  // three full blocks, all cached after the run
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.pool().num_blocks_cached(), 3);
  EXPECT_EQ(m.num_blocks_free(), 4);
  // Reuses 2 blocks and needs 3 more: only 2 can be had without evicting its own prefix.
  const Toks b = concat({1, 2, 3, 4}, {9, 9, 9, 9, 9, 9});
  const PrefixMatch pm = m.match_prefix(kNs1, b, int64_t(b.size()) - 1);
  ASSERT_EQ(pm.num_blocks(), 2);
  EXPECT_EQ(pm.num_evictable, 2);
  EXPECT_TRUE(m.can_allocate(int64_t(b.size()) - pm.num_tokens));  // the naive check would say yes
  EXPECT_FALSE(m.can_allocate(pm, int64_t(b.size())));
  EXPECT_EQ(m.allocate(7, int64_t(b.size()), pm).code(), StatusCode::kOutOfMemory);
  EXPECT_FALSE(m.has_seq(7));
  EXPECT_EQ(m.pool().num_blocks_cached(), 3);
  // Two new blocks fit: one plain, then a's third block is evicted, never the reused two.
  EXPECT_TRUE(m.can_allocate(pm, 8));
  ASSERT_TRUE(m.allocate(7, 8, pm).ok());
  EXPECT_EQ(m.block_table(7)[0], pm.blocks[0]);
  EXPECT_EQ(m.block_table(7)[1], pm.blocks[1]);
  EXPECT_EQ(m.prefix_stats().evictions_total, 1);
  EXPECT_VERIFIED(m);
}

TEST(PrefixCache, StaleMatchIsRefusedAndChangesNothing) {
  KvCacheManager m(8, 2);
  const Toks a = {1, 2, 3, 4, 5};
  run_seq(m, 1, kNs1, a);
  const PrefixMatch pm = m.match_prefix(kNs1, a, 4);
  ASSERT_EQ(pm.num_blocks(), 2);
  EXPECT_EQ(m.flush(), 2);
  EXPECT_FALSE(m.can_allocate(pm, 5));
  EXPECT_EQ(m.allocate(2, 5, pm).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.allocate(2, 3, pm).code(), StatusCode::kInvalidArgument);  // fewer tokens than the hit
  EXPECT_FALSE(m.has_seq(2));
  EXPECT_EQ(m.num_blocks_free(), 8);
  EXPECT_VERIFIED(m);
}

TEST(PrefixCache, PinningKeepsBlocksResidentWithinTheCap) {
  KvCacheManager m(10, 2, PrefixCacheOptions{true, 0.2});  // at most 2 pinned blocks
  const Toks a = {1, 2, 3, 4, 5, 6};
  run_seq(m, 1, kNs1, a);
  // Three blocks would exceed the cap: refused, nothing pinned.
  Expected<int64_t> r = m.pin_prefix(kNs1, a);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(m.pool().num_blocks_pinned(), 0);
  r = m.pin_prefix(kNs1, Toks{1, 2, 3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  EXPECT_VERIFIED(m);
  PrefixCacheStats s = m.prefix_stats();
  EXPECT_EQ(s.blocks_pinned, 2);
  EXPECT_EQ(s.blocks_cached, 1);
  EXPECT_EQ(s.blocks_free, 7);
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(m.num_blocks_free(), 8);  // pinned blocks cannot be taken
  // Pressure takes every other block, the unpinned cached one included, but not the pinned ones.
  EXPECT_FALSE(m.can_allocate(17));
  ASSERT_TRUE(m.allocate(2, 16).ok());
  EXPECT_EQ(m.match_prefix(kNs1, a, 6).num_tokens, 4);
  ASSERT_TRUE(m.free(2).ok());
  // A pinned prefix is pinned again without new blocks; one unpin leaves it pinned.
  r = m.pin_prefix(kNs1, Toks{1, 2, 3, 4, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  r = m.unpin_prefix(kNs1, Toks{1, 2, 3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  EXPECT_EQ(m.pool().num_blocks_pinned(), 2);
  r = m.unpin_prefix(kNs1, Toks{1, 2, 3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(m.pool().num_blocks_pinned(), 0);
  EXPECT_EQ(m.pool().num_blocks_cached(), 2);  // back in the LRU, evictable again
  r = m.unpin_prefix(kNs1, Toks{1, 2, 3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0);
  EXPECT_VERIFIED(m);
}

// Pins stop where min_unpinned_blocks would no longer stay unpinned, whatever the fraction.
TEST(PrefixCache, PinsLeaveTheReservedBlocksUnpinned) {
  PrefixCacheOptions o;
  o.max_pinned_fraction = 1.0;
  o.min_unpinned_blocks = 6;
  KvCacheManager m(10, 2, o);
  EXPECT_EQ(m.prefix_stats().pinned_blocks_cap, 4);
  const Toks a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.pin_prefix(kNs1, a).status().code(), StatusCode::kOutOfMemory);  // 5 blocks
  ASSERT_TRUE(m.pin_prefix(kNs1, Toks{1, 2, 3, 4, 5, 6, 7, 8}).ok());          // 4 blocks
  EXPECT_EQ(m.pool().num_blocks_pinned(), 4);
  EXPECT_TRUE(m.can_allocate(12));  // the reserved 6 blocks, the unpinned cached one evicted
  EXPECT_VERIFIED(m);
  // A reserve larger than the pool allows no pin at all; a fraction below it still rules.
  o.min_unpinned_blocks = 11;
  EXPECT_EQ(KvCacheManager(10, 2, o).prefix_stats().pinned_blocks_cap, 0);
  o.min_unpinned_blocks = 2;
  o.max_pinned_fraction = 0.3;
  EXPECT_EQ(KvCacheManager(10, 2, o).prefix_stats().pinned_blocks_cap, 3);
}

// The engine pins a prompt right after running it, possibly while a sequence still holds it.
TEST(PrefixCache, PinWhileReferencedAndStatesPartitionThePool) {
  KvCacheManager m(10, 2);
  const Toks a = {1, 2, 3, 4, 5};
  start_seq(m, 1, kNs1, a);  // holds 3 blocks, 2 of them indexed
  Expected<int64_t> r = m.pin_prefix(kNs1, a);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  PrefixCacheStats s = m.prefix_stats();
  EXPECT_EQ(s.blocks_pinned, 2);
  EXPECT_EQ(s.blocks_used, 1);
  EXPECT_EQ(s.blocks_cached + s.blocks_free + s.blocks_used + s.blocks_pinned, s.blocks_total);
  ASSERT_TRUE(m.free(1).ok());
  s = m.prefix_stats();
  EXPECT_EQ(s.blocks_pinned, 2);
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.blocks_free, 8);
  EXPECT_EQ(m.flush(), 0);  // pinned blocks survive a flush
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 4);
  EXPECT_VERIFIED(m);
}

TEST(PrefixCache, FlushDropsOnlyUnreferencedUnpinnedBlocks) {
  KvCacheManager m(16, 2);
  const Toks a = {1, 2, 3, 4, 5}, b = {6, 7, 8, 9, 10}, c = {11, 12, 13};
  run_seq(m, 1, kNs1, a);
  run_seq(m, 2, kNs1, b);
  run_seq(m, 3, kNs1, c);
  start_seq(m, 4, kNs1, a);                          // a's blocks are referenced
  ASSERT_TRUE(m.pin_prefix(kNs1, Toks{6, 7}).ok());  // b's first block is pinned
  EXPECT_EQ(m.flush(), 2);                           // b's second, c's only
  EXPECT_VERIFIED(m);
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 4);
  EXPECT_EQ(m.match_prefix(kNs1, b, 4).num_tokens, 2);
  EXPECT_EQ(m.match_prefix(kNs1, c, 2).num_tokens, 0);
  EXPECT_EQ(m.pool().num_blocks_cached(), 0);
  EXPECT_EQ(m.prefix_stats().evictions_total, 0);  // a flush is not an eviction
}

TEST(PrefixCache, StatsCountTokensSinceStartAndOverTheLastThousandQueries) {
  KvCacheManager m(8, 2);
  const Toks a = {1, 2, 3, 4};
  run_seq(m, 1, kNs1, a);  // query 4, hit 0
  PrefixCacheStats s = m.prefix_stats();
  EXPECT_EQ(s.queries_total, 1);
  EXPECT_EQ(s.query_tokens_total, 4);
  EXPECT_EQ(s.hit_tokens_total, 0);
  for (int i = 0; i < 1000; ++i) {
    const PrefixMatch pm = m.match_prefix(kNs1, a, 3);  // hits 2 of 4
    ASSERT_TRUE(m.allocate(100 + i, 4, pm).ok());
    ASSERT_TRUE(m.free(100 + i).ok());
  }
  s = m.prefix_stats();
  EXPECT_EQ(s.queries_total, 1001);
  EXPECT_EQ(s.query_tokens_total, 4004);
  EXPECT_EQ(s.hit_tokens_total, 2000);
  EXPECT_EQ(s.recent_queries, 1000);  // the miss fell out of the window
  EXPECT_EQ(s.recent_query_tokens, 4000);
  EXPECT_EQ(s.recent_hit_tokens, 2000);
  EXPECT_DOUBLE_EQ(s.hit_rate_recent(), 0.5);
  // A plain allocate (no match) is not a query.
  ASSERT_TRUE(m.allocate(5000, 3).ok());
  EXPECT_EQ(m.prefix_stats().queries_total, 1001);
  EXPECT_VERIFIED(m);
}

TEST(PrefixCache, EventsAndEvictedBlockLifetimes) {
  using namespace std::chrono;
  steady_clock::time_point now{};
  PrefixCacheOptions opt;
  opt.clock = [&now] { return now; };
  KvCacheManager m(2, 2, opt);
  std::vector<CacheEvent> events;
  m.set_event_listener([&events](const CacheEvent& e) { events.push_back(e); });
  run_seq(m, 1, kNs1, {1, 2, 3});  // allocated 2, committed 1, freed 2
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, CacheEventKind::kAllocated);
  EXPECT_EQ(events[0].seq, 1);
  EXPECT_EQ(events[0].blocks.size(), 2u);
  EXPECT_EQ(events[1].kind, CacheEventKind::kCommitted);
  const int32_t cached = events[1].blocks.at(0);
  EXPECT_EQ(events[2].kind, CacheEventKind::kFreed);
  EXPECT_EQ(events[2].blocks.front(), events[0].blocks.back());  // tail first
  now += seconds(5);
  events.clear();
  ASSERT_TRUE(m.allocate(2, 4).ok());  // one plain block, then the cached one is evicted
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, CacheEventKind::kEvicted);
  EXPECT_EQ(events[0].blocks, std::vector<int32_t>{cached});
  EXPECT_STREQ(cache_event_name(events[0].kind), "evicted");
  EXPECT_EQ(events[1].kind, CacheEventKind::kAllocated);
  std::vector<double> lives = m.take_evicted_lifetimes();
  ASSERT_EQ(lives.size(), 1u);
  EXPECT_DOUBLE_EQ(lives[0], 5.0);
  EXPECT_TRUE(m.take_evicted_lifetimes().empty());  // drained
}

// Two sequences computed the same blocks before either committed: the second keeps private
// copies but its chain runs through the indexed ones, so what it adds later is still shared.
TEST(PrefixCache, DuplicateComputationKeepsTheChain) {
  KvCacheManager m(16, 2);
  const Toks a = {1, 2, 3, 4, 5};
  ASSERT_TRUE(m.allocate(1, 5).ok());
  ASSERT_TRUE(m.allocate(2, 5, m.match_prefix(kNs1, a, 4)).ok());
  ASSERT_TRUE(m.allocate(3, 0, m.match_prefix(kNs1, a, 0)).ok());
  ASSERT_TRUE(m.free(1).ok());
  ASSERT_TRUE(m.allocate(1, 5, m.match_prefix(kNs1, a, 4)).ok());
  ASSERT_TRUE(m.commit(1, a).ok());
  ASSERT_TRUE(m.commit(2, a).ok());
  EXPECT_EQ(m.index().size(), 2u);
  EXPECT_EQ(m.num_committed_blocks(2), 2);
  const Toks a2 = concat(a, {6, 7});
  ASSERT_TRUE(m.append_slots(2, 2).ok());
  ASSERT_TRUE(m.commit(2, a2).ok());
  EXPECT_EQ(m.index().size(), 3u);
  EXPECT_EQ(m.match_prefix(kNs1, a2, 6).num_tokens, 6);
  EXPECT_VERIFIED(m);
}

TEST(PrefixCache, SwitchedOffHashesNothing) {
  KvCacheManager m(8, 2, PrefixCacheOptions{false});
  const Toks a = {1, 2, 3, 4, 5};
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.index().size(), 0u);
  EXPECT_EQ(m.pool().num_blocks_cached(), 0);
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 0);
  EXPECT_EQ(m.pin_prefix(kNs1, a).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(m.unpin_prefix(kNs1, a).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(m.flush(), 0);
  const PrefixCacheStats s = m.prefix_stats();
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.queries_total, 0);
  EXPECT_EQ(s.blocks_free, 8);
  // The free list keeps its plain FIFO order: released blocks queue behind never-used ones.
  std::vector<int32_t> order;
  for (int32_t b = m.pool().free_head(); b != kNoBlock; b = m.pool().free_next(b)) order.push_back(b);
  EXPECT_EQ(order, (std::vector<int32_t>{3, 4, 5, 6, 7, 2, 1, 0}));
  EXPECT_VERIFIED(m);
}

// ---- forced collisions: the key proposes, the stored content decides ----

BlockHash constant_hash(const BlockHash&, const BlockHash&, std::span<const int32_t>) { return BlockHash{7, 7}; }

TEST(PrefixCacheCollision, ConstantHashNeverServesAnotherPrefix) {
  PrefixCacheOptions opt;
  opt.hasher = constant_hash;
  KvCacheManager m(16, 2, opt);
  const Toks a = {1, 2, 3, 4, 5}, b = {9, 8, 3, 4, 5};
  run_seq(m, 1, kNs1, a);
  EXPECT_EQ(m.index().size(), 1u);  // every key collides: only a's first block could be indexed
  EXPECT_EQ(m.match_prefix(kNs1, b, 4).num_tokens, 0);
  EXPECT_EQ(m.match_prefix(kNs2, a, 4).num_tokens, 0);  // same tokens, other namespace
  EXPECT_EQ(m.match_prefix(kNs1, a, 4).num_tokens, 2);  // its own first block, nothing more
  run_seq(m, 2, kNs1, b);                               // collides at block 0: nothing indexed
  EXPECT_EQ(m.index().size(), 1u);
  EXPECT_EQ(m.match_prefix(kNs1, b, 4).num_tokens, 0);
  // A block repeating the first block's tokens at another position is not its twin.
  EXPECT_EQ(m.match_prefix(kNs1, Toks{1, 2, 1, 2, 1}, 4).num_tokens, 2);
  EXPECT_VERIFIED(m);
}

// A weak hash: the sum of the tokens, ignoring parent and namespace. A parent evicted and
// replaced by a colliding block must not adopt the old parent's cached children.
BlockHash sum_hash(const BlockHash&, const BlockHash&, std::span<const int32_t> t) {
  uint64_t s = 1;
  for (int32_t x : t) s += uint64_t(x);
  return BlockHash{0, s};
}

TEST(PrefixCacheCollision, OrphanedChildIsNeverAdoptedByACollidingParent) {
  PrefixCacheOptions opt;
  opt.hasher = sum_hash;
  opt.max_pinned_fraction = 1.0;
  KvCacheManager m(4, 2, opt);
  const Toks x = {1, 2, 10, 20, 0};  // blocks {1,2} {10,20}
  run_seq(m, 1, kNs1, x);
  ASSERT_EQ(m.index().size(), 2u);
  // Keep x's second block, let its first go: pin both, unpin the first, evict it.
  ASSERT_TRUE(m.pin_prefix(kNs1, x).ok());
  ASSERT_TRUE(m.unpin_prefix(kNs1, Toks{1, 2}).ok());
  ASSERT_TRUE(m.allocate(2, 6).ok());  // 2 plain blocks + the unpinned cached one
  EXPECT_EQ(m.prefix_stats().evictions_total, 1);
  ASSERT_TRUE(m.free(2).ok());
  // {2,1} collides with the evicted {1,2}; its child key collides with x's {10,20}.
  const Toks y = {2, 1, 10, 20, 0};
  run_seq(m, 3, kNs1, y);
  EXPECT_EQ(m.match_prefix(kNs1, y, 4).num_tokens, 2) << "x's {10,20} was computed after {1,2}, not {2,1}";
  EXPECT_EQ(m.match_prefix(kNs1, x, 4).num_tokens, 0);
  EXPECT_VERIFIED(m);
}

}  // namespace
}  // namespace kvserve
