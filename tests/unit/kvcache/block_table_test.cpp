#include "kvcache/block_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace kvserve {
namespace {

TEST(BlockTable, NumBlocksFor) {
  EXPECT_EQ(num_blocks_for(0, 16), 0);
  EXPECT_EQ(num_blocks_for(1, 16), 1);
  EXPECT_EQ(num_blocks_for(16, 16), 1);
  EXPECT_EQ(num_blocks_for(17, 16), 2);
  EXPECT_EQ(num_blocks_for(5, 1), 5);
  // No overflow at the top of the range.
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(num_blocks_for(max, 32), max / 32 + 1);
  EXPECT_EQ(num_blocks_for(max, 1), max);
}

TEST(BlockTable, MapsLogicalToPhysical) {
  BlockTable t;
  EXPECT_TRUE(t.empty());
  t.reserve_more(3);
  t.push_back(7);
  t.push_back(2);
  t.push_back(9);
  EXPECT_EQ(t.num_blocks(), 3);
  EXPECT_EQ(t[0], 7);
  EXPECT_EQ(t[2], 9);
  EXPECT_EQ(t.ids(), (std::vector<int32_t>{7, 2, 9}));
  t.pop_back();
  EXPECT_EQ(t.num_blocks(), 2);
  t.clear();
  EXPECT_TRUE(t.empty());
}

TEST(BlockTableDeathTest, OutOfRangeAsserts) {
  BlockTable t;
  t.push_back(1);
  EXPECT_DEATH((void)t[1], "logical block out of range");
  EXPECT_DEATH((void)t[-1], "logical block out of range");
}

}  // namespace
}  // namespace kvserve
