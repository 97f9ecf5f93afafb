#include "kvcache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvserve {
namespace {

#define EXPECT_VERIFIED(m)                  \
  do {                                      \
    Status _s = (m).verify();               \
    EXPECT_TRUE(_s.ok()) << _s.to_string(); \
  } while (0)

TEST(KvCacheManager, AllocateAppendFree) {
  KvCacheManager m(8, 4);
  EXPECT_EQ(m.num_blocks_total(), 8);
  EXPECT_EQ(m.block_size(), 4);
  ASSERT_TRUE(m.allocate(1, 6).ok());  // 2 blocks, the second half full
  EXPECT_TRUE(m.has_seq(1));
  EXPECT_EQ(m.num_tokens(1), 6);
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.num_blocks_used(), 2);
  EXPECT_EQ(m.pool().block(m.block_table(1)[0]).num_tokens, 4);
  EXPECT_EQ(m.pool().block(m.block_table(1)[1]).num_tokens, 2);
  EXPECT_VERIFIED(m);

  ASSERT_TRUE(m.append_slots(1, 2).ok());  // fills block 1, no new block
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.pool().block(m.block_table(1)[1]).num_tokens, 4);
  ASSERT_TRUE(m.append_slots(1, 1).ok());  // opens block 2
  EXPECT_EQ(m.block_table(1).size(), 3u);
  EXPECT_EQ(m.num_tokens(1), 9);
  EXPECT_VERIFIED(m);

  ASSERT_TRUE(m.free(1).ok());
  EXPECT_FALSE(m.has_seq(1));
  EXPECT_EQ(m.num_blocks_free(), 8);
  EXPECT_EQ(m.num_seqs(), 0u);
  EXPECT_VERIFIED(m);
}

TEST(KvCacheManager, ZeroTokenSequenceHoldsNoBlocks) {
  KvCacheManager m(1, 16);
  EXPECT_TRUE(m.can_allocate(0));
  ASSERT_TRUE(m.allocate(5, 0).ok());
  EXPECT_TRUE(m.block_table(5).empty());
  EXPECT_EQ(m.num_blocks_used(), 0);
  EXPECT_TRUE(m.can_append(5, 0));
  ASSERT_TRUE(m.append_slots(5, 0).ok());
  ASSERT_TRUE(m.append_slots(5, 1).ok());
  EXPECT_EQ(m.num_blocks_used(), 1);
  EXPECT_VERIFIED(m);
}

TEST(KvCacheManager, ErrorsChangeNothing) {
  KvCacheManager m(2, 16);
  ASSERT_TRUE(m.allocate(1, 20).ok());                               // both blocks
  EXPECT_EQ(m.allocate(1, 1).code(), StatusCode::kInvalidArgument);  // exists
  EXPECT_EQ(m.allocate(2, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(m.can_allocate(1));
  EXPECT_EQ(m.allocate(2, 1).code(), StatusCode::kOutOfMemory);
  EXPECT_FALSE(m.has_seq(2));
  EXPECT_TRUE(m.can_append(1, 12));  // fills the second block exactly
  EXPECT_FALSE(m.can_append(1, 13));
  EXPECT_EQ(m.append_slots(1, 13).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(m.num_tokens(1), 20);
  EXPECT_EQ(m.append_slots(1, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.append_slots(9, 1).code(), StatusCode::kNotFound);
  EXPECT_FALSE(m.can_append(9, 0));
  EXPECT_EQ(m.free(9).code(), StatusCode::kNotFound);
  EXPECT_EQ(m.num_blocks_used(), 2);
  EXPECT_VERIFIED(m);
}

TEST(KvCacheManager, TokenCountOverflowIsRefused) {
  KvCacheManager m(4, 1);
  ASSERT_TRUE(m.allocate(1, 1).ok());
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(m.can_append(1, max));
  EXPECT_FALSE(m.append_slots(1, max).ok());
  EXPECT_FALSE(m.can_allocate(max));
  EXPECT_EQ(m.num_tokens(1), 1);
  EXPECT_VERIFIED(m);
}

TEST(KvCacheManager, SlotMapping) {
  KvCacheManager m(10, 4);
  ASSERT_TRUE(m.allocate(1, 3).ok());      // takes block 0
  ASSERT_TRUE(m.allocate(2, 5).ok());      // blocks 1, 2
  ASSERT_TRUE(m.append_slots(1, 2).ok());  // seq 1 opens block 3
  const auto& t = m.block_table(1);
  ASSERT_EQ(t.size(), 2u);
  for (int64_t pos = 0; pos < m.num_tokens(1); ++pos) {
    KvSlot s = m.slot(1, pos);
    EXPECT_EQ(s.block, t[size_t(pos / 4)]);
    EXPECT_EQ(s.offset, pos % 4);
  }
  EXPECT_EQ(m.slot(1, 4).block, 3);
  EXPECT_EQ(m.slot(2, 4).block, 2);
}

TEST(KvCacheManager, FreeReleasesTailBlocksFirst) {
  KvCacheManager m(3, 1);
  ASSERT_TRUE(m.allocate(1, 3).ok());  // table {0, 1, 2}
  ASSERT_TRUE(m.free(1).ok());
  // The tail block is queued first, so it is the first to be reused.
  ASSERT_TRUE(m.allocate(2, 3).ok());
  EXPECT_EQ(m.block_table(2), (std::vector<int32_t>{2, 1, 0}));
}

TEST(KvCacheManager, Stats) {
  KvCacheManager m(10, 16);
  ASSERT_TRUE(m.allocate(1, 17).ok());
  ASSERT_TRUE(m.allocate(2, 3).ok());
  KvCacheStats s = m.stats();
  EXPECT_EQ(s.num_blocks_total, 10);
  EXPECT_EQ(s.num_blocks_used, 3);
  EXPECT_EQ(s.num_blocks_free, 7);
  EXPECT_EQ(s.num_seqs, 2);
  EXPECT_EQ(s.num_tokens, 20);
  EXPECT_EQ(s.block_size, 16);
  EXPECT_DOUBLE_EQ(s.usage(), 0.3);
  EXPECT_DOUBLE_EQ(KvCacheManager(0, 16).stats().usage(), 0.0);
}

TEST(KvCacheManagerDeathTest, QueriesOfUnknownSequencesAssert) {
  KvCacheManager m(2, 4);
  ASSERT_TRUE(m.allocate(1, 2).ok());
  EXPECT_DEATH((void)m.num_tokens(7), "unknown sequence");
  EXPECT_DEATH((void)m.block_table(7), "unknown sequence");
  EXPECT_DEATH((void)m.slot(1, 2), "position out of range");
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

TEST(KvCacheWindow, ReleaseBeforeLeavesLeadingHoles) {
  KvCacheManager m(8, 4, PrefixCacheOptions{false});
  ASSERT_TRUE(m.allocate(1, 10).ok());  // blocks for [0,4) [4,8) [8,10)
  const std::vector<int32_t> ids = m.block_table(1);
  Expected<int32_t> r = m.release_before(1, 7);  // only [0,4) lies wholly before 7
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1);
  EXPECT_EQ(m.block_table(1)[0], kNoBlock);
  EXPECT_EQ(m.num_released_blocks(1), 1);
  EXPECT_EQ(m.num_held_blocks(1), 2);
  EXPECT_EQ(m.num_blocks_used(), 2);
  EXPECT_TRUE(m.pool().is_free(ids[0]));
  EXPECT_VERIFIED(m);
  EXPECT_EQ(*m.release_before(1, 7), 0);    // idempotent
  EXPECT_EQ(*m.release_before(1, 100), 1);  // capped at num_tokens: the partial block [8,10) stays
  EXPECT_EQ(m.num_held_blocks(1), 1);
  ASSERT_TRUE(m.append_slots(1, 4).ok());   // grows past the holes as usual
  EXPECT_EQ(m.slot(1, 13).block, m.block_table(1)[3]);
  EXPECT_VERIFIED(m);
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_EQ(m.num_blocks_free(), 8);
  EXPECT_VERIFIED(m);
  EXPECT_EQ(m.release_before(9, 4).status().code(), StatusCode::kNotFound);
}

TEST(KvCacheShift, KeepInsideABlockMergesTheFirstMovedSlots) {
  KvCacheManager m(8, 4, PrefixCacheOptions{false});
  ASSERT_TRUE(m.allocate(1, 14).ok());  // A [0,4) B [4,8) C [8,12) D [12,14)
  const std::vector<int32_t> old = m.block_table(1);
  Expected<KvShiftPlan> plan = m.shift(1, 2, 4);  // keep 2 sinks, drop positions [2,6)
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // Positions [6,8) of B move to [2,4) of A (A is private: written in place), B is released,
  // C and D move down one block unchanged.
  ASSERT_EQ(plan->copies.size(), 1u);
  EXPECT_EQ(plan->copies[0].src_block, old[1]);
  EXPECT_EQ(plan->copies[0].dst_block, old[0]);
  EXPECT_EQ(plan->copies[0].src_slot, 2);
  EXPECT_EQ(plan->copies[0].num_slots, 2);
  EXPECT_EQ(m.block_table(1), (std::vector<int32_t>{old[0], old[2], old[3]}));
  EXPECT_EQ(m.num_tokens(1), 10);
  EXPECT_EQ(plan->rotate_begin, 2);
  EXPECT_EQ(plan->rotate_end, 10);
  EXPECT_EQ(plan->delta, -4);
  EXPECT_TRUE(m.pool().is_free(old[1]));
  EXPECT_VERIFIED(m);
}

TEST(KvCacheShift, KeepOnABlockBoundaryDropsWholeBlocks) {
  KvCacheManager m(8, 4, PrefixCacheOptions{false});
  ASSERT_TRUE(m.allocate(1, 16).ok());
  const std::vector<int32_t> old = m.block_table(1);
  Expected<KvShiftPlan> plan = m.shift(1, 4, 8);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->copies.empty());
  EXPECT_EQ(m.block_table(1), (std::vector<int32_t>{old[0], old[3]}));
  EXPECT_EQ(m.num_tokens(1), 8);
  EXPECT_VERIFIED(m);
  // Invalid shapes change nothing.
  EXPECT_EQ(m.shift(1, 4, 3).status().code(), StatusCode::kInvalidArgument);   // not a block multiple
  EXPECT_EQ(m.shift(1, 1, 8).status().code(), StatusCode::kInvalidArgument);   // beyond the tokens
  EXPECT_EQ(m.shift(1, -1, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.num_tokens(1), 8);
  ASSERT_TRUE(m.release_before(1, 4).ok());
  EXPECT_EQ(m.shift(1, 0, 4).status().code(), StatusCode::kInvalidArgument);  // holes: refused
  EXPECT_VERIFIED(m);
}

TEST(KvCacheShift, SharedAndIndexedBlocksAreCopiedNeverRewritten) {
  KvCacheManager m(16, 4);
  const BlockHash ns{0, 7};
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[size_t(i)] = 100 + i;
  PrefixMatch none;
  none.ns = ns;
  ASSERT_TRUE(m.allocate(1, 16, none).ok());
  ASSERT_TRUE(m.commit(1, tokens).ok());  // all four blocks indexed
  const PrefixMatch hit = m.match_prefix(ns, tokens, 15);
  ASSERT_EQ(hit.num_blocks(), 3);
  ASSERT_TRUE(m.allocate(2, 16, hit).ok());  // shares three blocks with 1
  const std::vector<int32_t> shared = m.block_table(2);
  ASSERT_EQ(*m.shift_blocks_needed(2, 2, 4), 2);  // the head (shared) and block 2 (shared); block 3 is private
  Expected<KvShiftPlan> plan = m.shift(2, 2, 4);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::vector<int32_t>& now = m.block_table(2);
  ASSERT_EQ(now.size(), 3u);
  EXPECT_NE(now[0], shared[0]);  // copied head: slots [0,2) from the old head, [2,4) from old block 1
  EXPECT_NE(now[1], shared[2]);  // copied before its keys are re-rotated
  EXPECT_EQ(now[2], shared[3]);  // held by sequence 2 alone: rotated in place
  ASSERT_EQ(plan->copies.size(), 3u);
  // Sequence 1 and the index are untouched.
  EXPECT_EQ(m.block_table(1)[0], shared[0]);
  EXPECT_EQ(m.match_prefix(ns, tokens, 16).num_blocks(), 4);
  EXPECT_EQ(m.num_committed_blocks(2), 0);  // cut to the unchanged kept blocks (none: keep < block)
  ASSERT_TRUE(m.commit(2, tokens).ok());    // a shifted sequence never commits again
  EXPECT_EQ(m.num_committed_blocks(2), 0);
  EXPECT_VERIFIED(m);
}

TEST(KvCacheShift, OwnCommittedBlocksLeaveTheIndexAndShiftInPlace) {
  KvCacheManager m(8, 4);
  const BlockHash ns{0, 9};
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[size_t(i)] = 7 * i;
  PrefixMatch none;
  none.ns = ns;
  ASSERT_TRUE(m.allocate(1, 16, none).ok());
  ASSERT_TRUE(m.commit(1, tokens).ok());
  ASSERT_EQ(m.index().size(), 4u);
  ASSERT_EQ(*m.shift_blocks_needed(1, 4, 4), 0);  // nobody else holds them: no copy
  const std::vector<int32_t> old = m.block_table(1);
  ASSERT_TRUE(m.shift(1, 4, 4).ok());  // keep is a whole block: no head to merge
  EXPECT_EQ(m.block_table(1), (std::vector<int32_t>{old[0], old[2], old[3]}));
  // Block 0 is unchanged and stays indexed; the dropped block 1 stays cached (ref 0, indexed);
  // the moved blocks 2 and 3 are rewritten, so they left the index.
  EXPECT_FALSE(m.pool().block(old[0]).hash.empty());
  EXPECT_FALSE(m.pool().block(old[1]).hash.empty());
  EXPECT_TRUE(m.pool().is_free(old[1]));
  EXPECT_TRUE(m.pool().block(old[2]).hash.empty());
  EXPECT_TRUE(m.pool().block(old[3]).hash.empty());
  EXPECT_EQ(m.match_prefix(ns, tokens, 16).num_blocks(), 2);  // blocks 0 and 1 still serve hits
  EXPECT_VERIFIED(m);

  // Keep inside a block: the cached head is copied (a spare block exists), so it still serves.
  KvCacheManager m2(8, 4);
  ASSERT_TRUE(m2.allocate(1, 16, none).ok());
  ASSERT_TRUE(m2.commit(1, tokens).ok());
  const std::vector<int32_t> before = m2.block_table(1);
  Expected<KvShiftPlan> plan = m2.shift(1, 2, 4);
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(m2.block_table(1)[0], before[0]);
  EXPECT_EQ(plan->copies.size(), 2u);  // the sinks, then the first moved slots
  EXPECT_EQ(m2.match_prefix(ns, tokens, 16).num_blocks(), 2);
  EXPECT_VERIFIED(m2);
}

}  // namespace
}  // namespace kvserve
