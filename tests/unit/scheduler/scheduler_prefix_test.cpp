// The scheduler with the prefix cache on: admission past a cached prefix (block boundaries,
// the leave-one-token rule, short prompts, namespaces), same-prefix arrivals computing the
// prefix once, a waiter that outlives its owner, preemption hitting its own blocks, sequences
// that must run their whole prompt, and what remove() commits.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "scheduler/scheduler.h"
#include "common/token_lists.h"

namespace kvserve {
namespace {

using namespace ::kvserve::test_util;

void expect_chunk(const ScheduledChunk& c, SeqId seq, int64_t start, int32_t n, bool sample) {
  EXPECT_EQ(c.seq, seq);
  EXPECT_EQ(c.start_pos, start);
  EXPECT_EQ(c.num_tokens, n);
  EXPECT_EQ(c.sample, sample);
}

#define EXPECT_VERIFIED(s)                  \
  do {                                      \
    Status _v = (s).verify();               \
    EXPECT_TRUE(_v.ok()) << _v.to_string(); \
  } while (0)

// Runs one sequence alone: its whole prompt in one step, one token sampled, then removed.
void run_alone(Scheduler& s, SeqId id, const Toks& prompt, const BlockHash& ns) {
  ASSERT_TRUE(s.add(id, prompt, ns).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  ASSERT_TRUE(o.chunks[0].sample);
  ASSERT_TRUE(s.append_token(id, 7).ok());
  ASSERT_TRUE(s.remove(id).ok());
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, SecondRequestPrefillsOnlyItsUncachedTail) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  const Toks p = iota_tokens(10, 1);
  run_alone(s, 1, p, kNs1);
  ASSERT_TRUE(s.add(2, p, kNs1).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 8, 2, true);
  EXPECT_EQ(o.num_batched_tokens, 2);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 8);
  EXPECT_EQ(cache.prefix_stats().hit_tokens_total, 8);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, WholePromptSequenceTakesNoHitNorWaitsButCommits) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  const Toks p = iota_tokens(10, 1);
  run_alone(s, 1, p, kNs1);
  // The same prompt again, its logits wanted at every position: all 10 tokens run.
  ASSERT_TRUE(s.add(2, p, kNs1, /*compute_whole_prompt=*/true).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 0, 10, true);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 0);
  EXPECT_VERIFIED(s);
  // Next to a running owner of the same new prefix it does not wait for the owner's blocks.
  const Toks q = iota_tokens(10, 50);
  ASSERT_TRUE(s.add(3, q, kNs1).ok());
  ASSERT_TRUE(s.add(4, q, kNs1, true).ok());
  ASSERT_TRUE(s.append_token(2, 7).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 3u);
  expect_chunk(o.chunks[1], 3, 0, 10, true);
  expect_chunk(o.chunks[2], 4, 0, 10, true);
  EXPECT_EQ(s.num_deferred_admissions(), 0);
  EXPECT_VERIFIED(s);
  // Its blocks are committed like anyone's: a later ordinary request hits them.
  ASSERT_TRUE(s.append_token(4, 7).ok());
  ASSERT_TRUE(s.remove(4).ok());
  ASSERT_TRUE(s.remove(3).ok());
  ASSERT_TRUE(s.add(5, q, kNs1).ok());
  o = s.schedule();
  EXPECT_EQ(s.find(5)->num_cached_tokens, 8);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, WholePromptSequenceRunsInChunksOfTheLogitsCap) {
  KvCacheManager cache(64, 4);
  SchedulerConfig cfg{4, 64};
  cfg.max_all_logits_chunk = 6;
  Scheduler s(cfg, cache);
  ASSERT_TRUE(s.add(1, iota_tokens(20, 1), kNs1, /*compute_whole_prompt=*/true).ok());
  ASSERT_TRUE(s.add(2, iota_tokens(20, 100), kNs1).ok());
  // Step 1: the scoring sequence gets 6 of the 64-token budget, the other the rest of its prompt.
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  expect_chunk(o.chunks[0], 1, 0, 6, false);
  expect_chunk(o.chunks[1], 2, 0, 20, true);
  EXPECT_VERIFIED(s);
  ASSERT_TRUE(s.append_token(2, 7).ok());
  for (int64_t start = 6; start < 20; start += 6) {
    o = s.schedule();
    bool seen = false;
    for (const ScheduledChunk& c : o.chunks)
      if (c.seq == 1) {
        expect_chunk(c, 1, start, int32_t(std::min<int64_t>(6, 20 - start)), start + 6 >= 20);
        seen = true;
      }
    EXPECT_TRUE(seen) << start;
    ASSERT_TRUE(s.append_token(2, 7).ok());
    EXPECT_VERIFIED(s);
  }
}

TEST(SchedulerPrefix, HitOnABlockBoundaryStillComputesTheLastToken) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  const Toks p = iota_tokens(8, 1);  // two full blocks, both cached after the first run
  run_alone(s, 1, p, kNs1);
  ASSERT_TRUE(s.add(2, p, kNs1).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 4, 4, true);  // the second block is recomputed for its last token
  ASSERT_TRUE(s.append_token(2, 7).ok());
  // A prompt one token longer hits both blocks: the hit ends exactly on the boundary.
  ASSERT_TRUE(s.add(3, concat(p, {50}), kNs1).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  expect_chunk(o.chunks[1], 3, 8, 1, true);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, PromptShorterThanABlockNeverHits) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  run_alone(s, 1, {1, 2, 3}, kNs1);
  ASSERT_TRUE(s.add(2, {1, 2, 3}, kNs1).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 0, 3, true);
  EXPECT_EQ(cache.index().size(), 0u);
}

TEST(SchedulerPrefix, TenantsWithDifferentNamespacesNeverShare) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  const Toks p = iota_tokens(10, 1);
  run_alone(s, 1, p, kNs1);
  ASSERT_TRUE(s.add(2, p, kNs2).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 0, 10, true);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 0);
}

TEST(SchedulerPrefix, SameUncachedPrefixArrivingTogetherIsComputedOnce) {
  KvCacheManager cache(64, 4);
  Scheduler s({8, 256}, cache);
  const Toks shared = iota_tokens(12, 100);
  for (SeqId id = 1; id <= 4; ++id) ASSERT_TRUE(s.add(id, concat(shared, {int32_t(id), 0}), kNs1).ok());
  // Step 1: the first computes the prefix; the others would hit its blocks, so they wait.
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 0, 14, true);
  EXPECT_EQ(s.num_waiting(), 3);
  EXPECT_GT(s.num_deferred_admissions(), 0);
  EXPECT_VERIFIED(s);
  ASSERT_TRUE(s.append_token(1, 9).ok());
  // Step 2: its blocks are committed; everyone else computes only its own two tokens.
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 4u);
  expect_chunk(o.chunks[0], 1, 14, 1, true);
  for (SeqId id = 2; id <= 4; ++id) {
    expect_chunk(o.chunks[size_t(id - 1)], id, 12, 2, true);
    EXPECT_EQ(s.find(id)->num_cached_tokens, 12);
  }
  EXPECT_EQ(o.num_batched_tokens, 1 + 3 * 2);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, WaiterWaitsForAChunkedOwnerThenHitsEverything) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 10}, cache);
  const Toks shared = iota_tokens(16, 100);
  ASSERT_TRUE(s.add(1, concat(shared, {1, 1}), kNs1).ok());
  ASSERT_TRUE(s.add(2, concat(shared, {2, 2}), kNs1).ok());
  ScheduleOutput o = s.schedule();  // owner: 10 tokens, the budget is spent
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 0, 10, false);
  o = s.schedule();  // owner: the other 8; blocks 0-1 are cached but block 2 is still pending
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 1, 10, 8, true);
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_VERIFIED(s);
  ASSERT_TRUE(s.append_token(1, 9).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  expect_chunk(o.chunks[1], 2, 16, 2, true);
  EXPECT_VERIFIED(s);
}

// A waiter never waits on an owner that is gone, whether or not the owner's K/V was written.
TEST(SchedulerPrefix, WaiterProceedsWhenItsOwnerIsRemoved) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  const Toks p = iota_tokens(12, 100);
  ASSERT_TRUE(s.add(1, p, kNs1).ok());
  ASSERT_TRUE(s.add(2, p, kNs1).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  EXPECT_EQ(s.num_waiting(), 1);
  ASSERT_TRUE(s.remove(1, /*kv_written=*/false).ok());  // the step failed: nothing committed
  EXPECT_EQ(cache.index().size(), 0u);
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  expect_chunk(o.chunks[0], 2, 0, 12, true);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, RemoveCommitsOnlyWrittenBlocks) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  ASSERT_TRUE(s.add(1, iota_tokens(9, 1), kNs1).ok());
  (void)s.schedule();
  ASSERT_TRUE(s.remove(1, false).ok());
  EXPECT_EQ(cache.index().size(), 0u);
  ASSERT_TRUE(s.add(2, iota_tokens(9, 1), kNs1).ok());
  (void)s.schedule();
  // Finished by a stop token: no append_token, but its step ran.
  ASSERT_TRUE(s.remove(2).ok());
  EXPECT_EQ(cache.index().size(), 2u);
  EXPECT_EQ(cache.pool().num_blocks_cached(), 2);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, PreemptedSequenceHitsItsOwnCommittedBlocks) {
  KvCacheManager cache(5, 4);  // 20 token slots
  Scheduler s({4, 64}, cache);
  ASSERT_TRUE(s.add(1, iota_tokens(8, 1), kNs1).ok());
  ASSERT_TRUE(s.add(2, iota_tokens(8, 101), kNs1).ok());
  ScheduleOutput o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 2u);
  ASSERT_TRUE(s.append_token(1, 9).ok());
  ASSERT_TRUE(s.append_token(2, 9).ok());
  // Both need a fifth block for their 9th token and one is free: the newest is preempted.
  o = s.schedule();
  ASSERT_EQ(o.preempted, std::vector<SeqId>{2});
  ASSERT_TRUE(s.append_token(1, 10).ok());
  ASSERT_TRUE(s.remove(1).ok());
  o = s.schedule();
  ASSERT_EQ(o.chunks.size(), 1u);
  // Prompt (8) + the sampled token (1): its two committed blocks are still cached.
  expect_chunk(o.chunks[0], 2, 8, 1, true);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 8);
  EXPECT_VERIFIED(s);
}

// The no-cache baseline recomputes from 0 each step; what it commits keeps the namespace.
TEST(SchedulerPrefix, ResetComputedKeepsTheNamespace) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64}, cache);
  const Toks p = iota_tokens(9, 1);
  ASSERT_TRUE(s.add(1, p, kNs2).ok());
  (void)s.schedule();
  ASSERT_TRUE(s.append_token(1, 5).ok());
  ASSERT_TRUE(s.reset_computed(1).ok());
  ScheduleOutput o = s.schedule();
  expect_chunk(o.chunks.at(0), 1, 0, 10, true);
  ASSERT_TRUE(s.append_token(1, 6).ok());
  ASSERT_TRUE(s.remove(1).ok());
  EXPECT_EQ(cache.prefix_stats().queries_total, 1);  // the reset is not a query
  EXPECT_EQ(cache.match_prefix(kNs2, p, 8).num_tokens, 8);
  EXPECT_EQ(cache.match_prefix(kNs1, p, 8).num_tokens, 0);
  EXPECT_VERIFIED(s);
}

TEST(SchedulerPrefix, SwitchedOffInTheSchedulerHashesNothing) {
  KvCacheManager cache(64, 4);
  Scheduler s({4, 64, false}, cache);
  const Toks p = iota_tokens(10, 1);
  run_alone(s, 1, p, kNs1);
  ASSERT_TRUE(s.add(2, p, kNs1).ok());
  ScheduleOutput o = s.schedule();
  expect_chunk(o.chunks.at(0), 2, 0, 10, true);
  EXPECT_EQ(cache.index().size(), 0u);
  EXPECT_EQ(cache.prefix_stats().queries_total, 0);
}

}  // namespace
}  // namespace kvserve
