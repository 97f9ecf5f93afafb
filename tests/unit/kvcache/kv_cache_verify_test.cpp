// verify() must notice each kind of corruption. Each test builds a healthy cache, breaks exactly
// one invariant through KvCacheTestPeer, and expects an internal_error naming it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv_cache_test_peer.h"
#include "kvcache/kv_cache_manager.h"

namespace kvserve {
namespace {

using Peer = KvCacheTestPeer;

// seq 1: 20 tokens in blocks {0, 1}; seq 2: 5 tokens in block {2}; blocks 3..7 free.
KvCacheManager healthy() {
  KvCacheManager m(8, 16);
  KVS_ASSERT(m.allocate(1, 20).ok(), "setup");
  KVS_ASSERT(m.allocate(2, 5).ok(), "setup");
  KVS_ASSERT(m.verify().ok(), "setup");
  return m;
}

void expect_detected(KvCacheManager& m, const std::string& needle) {
  Status s = m.verify();
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message();
}

TEST(KvCacheVerify, HealthyCachePasses) {
  KvCacheManager m = healthy();
  EXPECT_TRUE(m.verify().ok());
}

TEST(KvCacheVerify, RefCountTooHigh) {
  KvCacheManager m = healthy();
  Peer::block(m, 0).ref_count = 2;
  expect_detected(m, "ref_count 2 but 1 table entries");
}

TEST(KvCacheVerify, RefCountNegative) {
  KvCacheManager m = healthy();
  Peer::block(m, 0).ref_count = -1;
  expect_detected(m, "negative ref_count");
}

TEST(KvCacheVerify, UsedBlockMarkedFree) {
  KvCacheManager m = healthy();
  Peer::block(m, 2).ref_count = 0;  // seq 2 still holds it
  expect_detected(m, "block 2 has ref_count 0 but is not in the free list");
}

TEST(KvCacheVerify, FreeBlockWithReferenceCount) {
  KvCacheManager m = healthy();
  Peer::block(m, 5).ref_count = 1;
  expect_detected(m, "block 5 has ref_count 1 but is in the free list");
}

TEST(KvCacheVerify, BlockInTwoTables) {
  KvCacheManager m = healthy();
  // seq 2 now names seq 1's full block 0 (token counts kept consistent); block 2 is orphaned.
  Peer::table(m, 2)[0] = 0;
  Peer::seq_tokens(m, 2) = 16;
  Peer::total_tokens(m) += 11;
  expect_detected(m, "block 0 has ref_count 1 but 2 table entries");
}

TEST(KvCacheVerify, BlockTwiceInOneTable) {
  KvCacheManager m = healthy();
  Peer::table(m, 1)[1] = 0;
  expect_detected(m, "repeats block 0");
}

TEST(KvCacheVerify, OutOfRangeIdInTable) {
  KvCacheManager m = healthy();
  Peer::table(m, 2)[0] = 8;
  expect_detected(m, "out-of-range block 8");
}

TEST(KvCacheVerify, TableLengthDisagreesWithTokens) {
  KvCacheManager m = healthy();
  Peer::seq_tokens(m, 1) = 33;  // needs 3 blocks, holds 2
  Peer::total_tokens(m) += 13;
  expect_detected(m, "expected 3");
}

TEST(KvCacheVerify, BlockFillDisagrees) {
  KvCacheManager m = healthy();
  Peer::block(m, 1).num_tokens = 3;  // should be 20 - 16 = 4
  expect_detected(m, "holds 3 tokens, expected 4");
}

TEST(KvCacheVerify, FreeBlockHoldingTokens) {
  KvCacheManager m = healthy();
  Peer::block(m, 6).num_tokens = 1;
  expect_detected(m, "free block 6 without a hash holds 1 tokens");
}

TEST(KvCacheVerify, TokenTotalDrift) {
  KvCacheManager m = healthy();
  Peer::total_tokens(m) = 24;
  expect_detected(m, "token total");
}

TEST(KvCacheVerify, FreeCounterDrift) {
  KvCacheManager m = healthy();
  Peer::num_free(m) = 4;
  expect_detected(m, "free counter");
}

TEST(KvCacheVerify, FreeListDropsABlock) {
  KvCacheManager m = healthy();
  // Splice block 4 out of the links but leave it marked free.
  Block& b3 = Peer::block(m, 3);
  Block& b5 = Peer::block(m, 5);
  b3.next = 5;
  b5.prev = 3;
  expect_detected(m, "free list links 4");
}

TEST(KvCacheVerify, FreeListCycle) {
  KvCacheManager m = healthy();
  Peer::block(m, 7).next = 3;  // tail points back at the head
  expect_detected(m, "appears twice");
}

TEST(KvCacheVerify, FreeListWrongPrev) {
  KvCacheManager m = healthy();
  Peer::block(m, 6).prev = 4;
  expect_detected(m, "wrong prev link");
}

TEST(KvCacheVerify, FreeListWrongTail) {
  KvCacheManager m = healthy();
  Peer::free_tail(m) = 6;
  expect_detected(m, "tail");
}

TEST(KvCacheVerify, FreeListLinksAUsedBlock) {
  KvCacheManager m = healthy();
  Peer::free_head(m) = 0;  // a used block at the head
  Peer::block(m, 0).next = 3;
  expect_detected(m, "used block 0 still has free-list links");
}

TEST(KvCacheVerify, WrongBlockId) {
  KvCacheManager m = healthy();
  Peer::block(m, 4).id = 5;
  expect_detected(m, "block 4 has id 5");
}

// Sharing is legal when the ref counts say so: two sequences naming one full block, each entry
// counted, passes verify and both frees return every block. This is the prefix-cache shape.
TEST(KvCacheVerify, ConsistentSharingPasses) {
  KvCacheManager m(8, 16);
  ASSERT_TRUE(m.allocate(1, 20).ok());  // {0, 1}
  ASSERT_TRUE(m.allocate(2, 18).ok());  // {2, 3}
  Peer::share_block(m, 2, 0, 0);        // seq 2's full first block becomes seq 1's block 0
  EXPECT_EQ(m.pool().block(0).ref_count, 2);
  EXPECT_TRUE(m.pool().is_free(2));
  Status s = m.verify();
  EXPECT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_EQ(m.pool().block(0).ref_count, 1);
  EXPECT_TRUE(m.verify().ok());
  ASSERT_TRUE(m.free(2).ok());
  EXPECT_EQ(m.num_blocks_free(), 8);
  EXPECT_TRUE(m.verify().ok());
}

// A free block may keep tokens only while it carries a hash (a reusable cached block).
TEST(KvCacheVerify, CachedFreeBlockMayKeepTokens) {
  KvCacheManager m(8, 4);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(m.allocate(1, 6, m.match_prefix({}, toks, 5)).ok());
  ASSERT_TRUE(m.commit(1, toks).ok());  // block 0 (full) is indexed, block 1 is not
  const int32_t cached = m.block_table(1)[0];
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_EQ(m.pool().block(cached).num_tokens, 4);
  EXPECT_TRUE(m.pool().is_free(cached));
  Status s = m.verify();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// A hash set behind the index's back (no commit) is caught.
TEST(KvCacheVerify, HashedBlockOutsideTheChain) {
  KvCacheManager m = healthy();
  Peer::set_hash(m, 0, BlockHash{1, 2});  // seq 1's full block 0
  expect_detected(m, "beyond the committed chain");
}

}  // namespace
}  // namespace kvserve
