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
