// Scheduler unit tests: chunked-prefill boundaries, decode-before-prefill order, max_seqs,
// FCFS admission without overtaking, preemption of the newest sequence and its recompute.
// These run with the prefix cache off: the policy without it must stay exactly this one
// (scheduler_prefix_test.cpp covers it on).
#include <gtest/gtest.h>

#include <numeric>

#include "scheduler/scheduler.h"

namespace kvserve {
namespace {

std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 1);
  return p;
}

void expect_chunk(const ScheduledChunk& c, SeqId seq, int64_t start, int32_t n, bool sample) {
  EXPECT_EQ(c.seq, seq);
  EXPECT_EQ(c.start_pos, start);
  EXPECT_EQ(c.num_tokens, n);
  EXPECT_EQ(c.sample, sample);
}

TEST(Scheduler, ChunkedPrefillSplitsAtTheBudget) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 8, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(20)).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 0, 8, false);
  EXPECT_EQ(o.num_batched_tokens, 8);
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 8, 8, false);
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 16, 4, true);  // ends the prompt: sample
  ASSERT_TRUE(s.append_token(1, 99).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 20, 1, true);  // decode
  EXPECT_EQ(cache.num_tokens(1), 21);
  EXPECT_TRUE(s.verify().ok()) << s.verify().to_string();
}

TEST(Scheduler, PromptExactlyTheBudgetSamplesAtOnce) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 8, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(8)).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 0, 8, true);
}

TEST(Scheduler, AppendWithoutSampledPositionIsRejected) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 8, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(20)).ok());
  EXPECT_FALSE(s.append_token(1, 5).ok());  // waiting
  (void)s.schedule();
  EXPECT_FALSE(s.append_token(1, 5).ok());  // mid-prefill
  EXPECT_FALSE(s.append_token(7, 5).ok());  // unknown
  EXPECT_FALSE(s.add(1, prompt_of(3)).ok());
  EXPECT_FALSE(s.add(2, {}).ok());
}

TEST(Scheduler, DecodeComesBeforePrefillAndSharesTheBudget) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 8, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(3)).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  ASSERT_TRUE(s.append_token(1, 7).ok());
  ASSERT_TRUE(s.add(2, prompt_of(20)).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  expect_chunk(o.chunks[0], 1, 3, 1, true);
  expect_chunk(o.chunks[1], 2, 0, 7, false);  // 8 - 1 decode token
  ASSERT_TRUE(s.append_token(1, 8).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  expect_chunk(o.chunks[0], 1, 4, 1, true);
  expect_chunk(o.chunks[1], 2, 7, 7, false);  // running prefill continues
  EXPECT_TRUE(s.verify().ok()) << s.verify().to_string();
}

TEST(Scheduler, MaxSeqsCapsTheRunningSet) {
  KvCacheManager cache(64, 4);
  Scheduler s({2, 64, false}, cache);
  for (SeqId id = 1; id <= 3; ++id) ASSERT_TRUE(s.add(id, prompt_of(2)).ok());
  ScheduleOutput o = s.schedule();
  EXPECT_EQ(o.chunks.size(), 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.waiting_ids(), std::vector<SeqId>{3});
  ASSERT_TRUE(s.remove(1).ok());
  ASSERT_TRUE(s.append_token(2, 1).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  expect_chunk(o.chunks[0], 2, 2, 1, true);
  expect_chunk(o.chunks[1], 3, 0, 2, true);
}

TEST(Scheduler, AdmissionIsFirstComeFirstServedWithoutOvertaking) {
  KvCacheManager cache(4, 4);  // 16 token slots
  Scheduler s({8, 64, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(10)).ok());  // 3 blocks
  ASSERT_TRUE(s.add(2, prompt_of(8)).ok());   // 2 blocks: does not fit beside 1
  ASSERT_TRUE(s.add(3, prompt_of(2)).ok());   // 1 block: would fit, but may not overtake 2
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  EXPECT_EQ(o.chunks[0].seq, 1);
  EXPECT_EQ(s.waiting_ids(), (std::vector<SeqId>{2, 3}));
  ASSERT_TRUE(s.remove(1).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  EXPECT_EQ(o.chunks[0].seq, 2);
  EXPECT_EQ(o.chunks[1].seq, 3);
  EXPECT_TRUE(s.verify().ok()) << s.verify().to_string();
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesItsTokens) {
  KvCacheManager cache(4, 4);  // 16 token slots
  Scheduler s({8, 64, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(8)).ok());  // 2 full blocks
  ASSERT_TRUE(s.add(2, prompt_of(7)).ok());  // 2 blocks, one slot left in the last
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  ASSERT_TRUE(s.append_token(1, 100).ok());
  ASSERT_TRUE(s.append_token(2, 200).ok());
  // Step 2: seq 1 needs a fifth block: none free, so seq 2 (newest) is preempted; seq 2's own
  // decode would have fit in its last block, but it goes first as the newest.
  o = s.schedule();
  ASSERT_EQ(o.preempted, std::vector<SeqId>{2});
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 8, 1, true);
  EXPECT_EQ(s.waiting_ids(), std::vector<SeqId>{2});
  EXPECT_EQ(s.find(2)->num_computed, 0);
  EXPECT_EQ(s.find(2)->num_tokens(), 8);  // prompt + the generated token survive
  EXPECT_EQ(s.num_preemptions(), 1);
  EXPECT_TRUE(s.verify().ok()) << s.verify().to_string();
  // Seq 1 ends; seq 2 comes back and recomputes all 8 tokens in one chunk, then samples.
  ASSERT_TRUE(s.remove(1).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 0, 8, true);
  EXPECT_EQ(cache.num_tokens(2), 8);
  EXPECT_TRUE(s.verify().ok()) << s.verify().to_string();
}

TEST(Scheduler, RemoveAndResetFreeBlocks) {
  KvCacheManager cache(16, 4);
  Scheduler s({4, 64, false}, cache);
  ASSERT_TRUE(s.add(1, prompt_of(10)).ok());
  ASSERT_TRUE(s.add(2, prompt_of(10)).ok());
  (void)s.schedule();
  EXPECT_EQ(cache.num_blocks_used(), 6);
  ASSERT_TRUE(s.append_token(1, 3).ok());
  ASSERT_TRUE(s.reset_computed(1).ok());
  EXPECT_EQ(cache.num_blocks_used(), 3);
  ScheduleOutput o = s.schedule();
  ASSERT_GE(o.chunks.size(), 1u);
  bool found = false;
  for (const ScheduledChunk& c : o.chunks)
    if (c.seq == 1) {
      expect_chunk(c, 1, 0, 11, true);
      found = true;
    }
  EXPECT_TRUE(found);
  ASSERT_TRUE(s.remove(1).ok());
  ASSERT_TRUE(s.remove(2).ok());
  EXPECT_EQ(cache.num_blocks_used(), 0);
  EXPECT_FALSE(s.has_work());
  EXPECT_FALSE(s.remove(2).ok());
  EXPECT_TRUE(s.verify().ok()) << s.verify().to_string();
}

}  // namespace
}  // namespace kvserve
