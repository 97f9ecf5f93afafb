#include "engine/kv_arena_size.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvserve {
namespace {

// stories260K's shape: 5 layers x 4 KV heads x 8 dims, f32 K and V: 1,280 bytes per token,
// 20,480 per 16-token block.
KvLayout small_layout() {
  KvLayout l;
  l.num_layers = 5;
  l.num_kv_heads = 4;
  l.head_dim = 8;
  l.block_size = 16;
  return l;
}

TEST(KvArenaSize, OneSequenceOfTheContextWithoutABudget) {
  auto a = size_kv_arena(small_layout(), 2048, "", UINT64_MAX);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->num_blocks, 128);
  EXPECT_EQ(a->ctx, 2048);
  a = size_kv_arena(small_layout(), 2040, "", 128 * 20480);  // exactly fits, last block partial
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->num_blocks, 128);
}

TEST(KvArenaSize, AContextPastTheMemoryIsRefusedWithTheLargestThatFits) {
  // 100 blocks' worth of memory: a 2,048-token context (128 blocks) does not fit, 1,600 does.
  auto a = size_kv_arena(small_layout(), 2048, "", 100 * 20480 + 5);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfMemory);
  const std::string m = a.status().message();
  EXPECT_NE(m.find("context of 2048 tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("1280 bytes per token, K f32, V f32"), std::string::npos) << m;
  EXPECT_NE(m.find("--ctx to at most 1600"), std::string::npos) << m;
  EXPECT_NE(m.find("--kv-type q8_0"), std::string::npos) << m;
  EXPECT_TRUE(size_kv_arena(small_layout(), 1600, "", 100 * 20480 + 5).ok());
  a = size_kv_arena(small_layout(), 2048, "", 100);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("less than one KV block"), std::string::npos) << a.status().message();
}

TEST(KvArenaSize, ABudgetCapsTheContext) {
  auto a = size_kv_arena(small_layout(), 2048, "204800", UINT64_MAX);  // 10 blocks
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->num_blocks, 10);
  EXPECT_EQ(a->ctx, 160);
  a = size_kv_arena(small_layout(), 64, "1MiB", UINT64_MAX);  // more blocks than the context needs
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->num_blocks, 51);
  EXPECT_EQ(a->ctx, 64);
}

TEST(KvArenaSize, ABudgetPastTheMemoryOrBelowOneBlockIsRefused) {
  auto a = size_kv_arena(small_layout(), 2048, "1MiB", 512 * 1024);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(a.status().message().find("--kv-memory 1MiB"), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find("memory available"), std::string::npos) << a.status().message();
  a = size_kv_arena(small_layout(), 2048, "1KiB", UINT64_MAX);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("holds no block"), std::string::npos) << a.status().message();
  EXPECT_FALSE(size_kv_arena(small_layout(), 2048, "lots", UINT64_MAX).ok());
}

}  // namespace
}  // namespace kvserve
