#include "engine/context_policy.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

std::vector<int32_t> iota(int n, int first = 1) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

TEST(ContextPolicy, ParsesTheNamedPolicies) {
  EXPECT_EQ(*parse_context_overflow("error"), ContextOverflow::kError);
  EXPECT_EQ(*parse_context_overflow("truncate"), ContextOverflow::kTruncate);
  EXPECT_EQ(*parse_context_overflow("shift"), ContextOverflow::kShift);
  EXPECT_FALSE(parse_context_overflow("drop").ok());
  EXPECT_STREQ(context_overflow_name(ContextOverflow::kTruncate), "truncate");
}

TEST(ContextPolicy, FittingPromptsAreUntouched) {
  for (ContextOverflow p : {ContextOverflow::kError, ContextOverflow::kTruncate}) {
    std::vector<int32_t> prompt = iota(10);
    EXPECT_EQ(*fit_prompt(p, prompt, 6, 16, 1), 0);
    EXPECT_EQ(prompt, iota(10));
  }
}

TEST(ContextPolicy, ErrorStatesTheSizes) {
  std::vector<int32_t> prompt = iota(10);
  auto r = fit_prompt(ContextOverflow::kError, prompt, 7, 16, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("17 tokens exceeds the context length of 16"), std::string::npos);
  EXPECT_EQ(prompt, iota(10));
}

TEST(ContextPolicy, TruncateDropsTheOldestTokensAfterBos) {
  std::vector<int32_t> prompt = iota(10);  // 1 (BOS) 2 .. 10
  EXPECT_EQ(*fit_prompt(ContextOverflow::kTruncate, prompt, 10, 16, 1), 4);
  EXPECT_EQ(prompt, (std::vector<int32_t>{1, 6, 7, 8, 9, 10}));
  // Without a BOS in front, the very first tokens go.
  std::vector<int32_t> nobos = iota(10, 100);
  EXPECT_EQ(*fit_prompt(ContextOverflow::kTruncate, nobos, 10, 16, 1), 4);
  EXPECT_EQ(nobos, (std::vector<int32_t>{104, 105, 106, 107, 108, 109}));
}

TEST(ContextPolicy, TruncateNeedsRoomForOnePromptToken) {
  std::vector<int32_t> prompt = iota(10);
  EXPECT_FALSE(fit_prompt(ContextOverflow::kTruncate, prompt, 15, 16, 1).ok());  // only the BOS would fit
  EXPECT_EQ(prompt, iota(10));
  EXPECT_EQ(*fit_prompt(ContextOverflow::kTruncate, prompt, 14, 16, 1), 8);
  EXPECT_EQ(prompt, (std::vector<int32_t>{1, 10}));
}

TEST(ContextPolicy, ShiftIgnoresMaxTokensAndKeepsTheSinks) {
  std::vector<int32_t> prompt = iota(10);
  EXPECT_EQ(*fit_prompt(ContextOverflow::kShift, prompt, 1000000, 16, 1, 4), 0);  // generation shifts
  EXPECT_EQ(prompt, iota(10));
  std::vector<int32_t> longer = iota(20);  // 1..20 into 16: keep 1..4, drop 5..8
  EXPECT_EQ(*fit_prompt(ContextOverflow::kShift, longer, 5, 16, 1, 4), 4);
  EXPECT_EQ(longer.size(), 16u);
  EXPECT_EQ(longer[3], 4);
  EXPECT_EQ(longer[4], 9);
}

TEST(ContextPolicy, ShiftDiscardsHalfInWholeBlocks) {
  EXPECT_EQ(*shift_discard(2048, 4, 16), 1008);  // (2048 - 4) / 2 = 1022 -> 63 blocks
  EXPECT_EQ(*shift_discard(64, 0, 16), 32);
  EXPECT_EQ(*shift_discard(40, 4, 16), 16);
  EXPECT_FALSE(shift_discard(40, 10, 16).ok());  // 15 tokens: not one block
  EXPECT_FALSE(shift_discard(64, -1, 16).ok());
}

}  // namespace
}  // namespace kvserve
