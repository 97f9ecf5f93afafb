#include "kvcache/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvserve {
namespace {

std::vector<int32_t> free_order(const BlockPool& p) {
  std::vector<int32_t> out;
  for (int32_t id = p.free_head(); id != kNoBlock; id = p.free_next(id)) out.push_back(id);
  return out;
}

TEST(BlockPool, StartsAllFreeInIdOrder) {
  BlockPool p(4, 16);
  EXPECT_EQ(p.num_blocks_total(), 4);
  EXPECT_EQ(p.num_blocks_free(), 4);
  EXPECT_EQ(p.num_blocks_used(), 0);
  EXPECT_EQ(p.block_size(), 16);
  EXPECT_EQ(free_order(p), (std::vector<int32_t>{0, 1, 2, 3}));
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p.block(i).id, i);
    EXPECT_EQ(p.block(i).ref_count, 0);
    EXPECT_TRUE(p.is_free(i));
  }
  EXPECT_TRUE(p.verify().ok());
}

TEST(BlockPool, EmptyPool) {
  BlockPool p(0, 1);
  EXPECT_EQ(p.num_blocks_free(), 0);
  EXPECT_EQ(p.free_head(), kNoBlock);
  EXPECT_TRUE(p.verify().ok());
}

TEST(BlockPool, AllocateTakesHeadReleaseAppendsToTail) {
  BlockPool p(4, 16);
  EXPECT_EQ(p.allocate(), 0);
  EXPECT_EQ(p.allocate(), 1);
  EXPECT_EQ(p.num_blocks_used(), 2);
  EXPECT_EQ(p.block(0).ref_count, 1);
  EXPECT_FALSE(p.is_free(0));
  p.release(0);
  // Released blocks queue behind the never-used ones: least recently released leaves first.
  EXPECT_EQ(free_order(p), (std::vector<int32_t>{2, 3, 0}));
  EXPECT_EQ(p.allocate(), 2);
  EXPECT_EQ(p.allocate(), 3);
  EXPECT_EQ(p.allocate(), 0);
  EXPECT_EQ(p.num_blocks_free(), 0);
  EXPECT_EQ(p.free_head(), kNoBlock);
  EXPECT_TRUE(p.verify().ok());
}

TEST(BlockPool, RefCountsAreReal) {
  BlockPool p(3, 16);
  int32_t b = p.allocate();
  p.ref(b);
  EXPECT_EQ(p.block(b).ref_count, 2);
  p.release(b);
  EXPECT_FALSE(p.is_free(b));  // still held once
  EXPECT_EQ(p.num_blocks_free(), 2);
  p.release(b);
  EXPECT_TRUE(p.is_free(b));
  EXPECT_EQ(p.num_blocks_free(), 3);
  EXPECT_TRUE(p.verify().ok());
}

// ref() of a free block unlinks it from the middle of the list in O(1): the prefix-cache hit path.
TEST(BlockPool, RefOfFreeBlockUnlinksItFromAnywhere) {
  BlockPool p(5, 16);
  p.ref(2);  // middle
  EXPECT_EQ(free_order(p), (std::vector<int32_t>{0, 1, 3, 4}));
  p.ref(0);  // head
  p.ref(4);  // tail
  EXPECT_EQ(free_order(p), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(p.num_blocks_free(), 2);
  EXPECT_EQ(p.block(2).ref_count, 1);
  EXPECT_TRUE(p.verify().ok());
  p.release(4);
  p.release(2);
  p.release(0);
  EXPECT_EQ(free_order(p), (std::vector<int32_t>{1, 3, 4, 2, 0}));
  EXPECT_TRUE(p.verify().ok());
}

TEST(BlockPool, ReleaseClearsTokensAndAllocateReturnsCleanBlocks) {
  BlockPool p(2, 8);
  int32_t b = p.allocate();
  p.set_num_tokens(b, 5);
  EXPECT_EQ(p.block(b).num_tokens, 5);
  p.release(b);
  EXPECT_EQ(p.block(b).num_tokens, 0);
  EXPECT_TRUE(p.verify().ok());
}

TEST(BlockPoolDeathTest, MisuseAsserts) {
  BlockPool p(1, 4);
  EXPECT_DEATH(p.release(0), "unreferenced");
  int32_t b = p.allocate();
  EXPECT_DEATH(p.allocate(), "exhausted");
  EXPECT_DEATH(p.set_num_tokens(b, 5), "num_tokens out of range");
  EXPECT_DEATH((void)p.block(1), "block id out of range");
}

}  // namespace
}  // namespace kvserve
