// Randomized scheduler runs against a model of what must happen: sequences arrive, run,
// finish or are cancelled on a small block pool, and after EVERY step the scheduler and the
// KV cache manager are checked (verify(), the token budget, chunk positions, FCFS order),
// preempted sequences recompute exactly their tokens, and every sequence finishes.
// Run twice: prefix cache off (the original policy) and on, where prompts share prefixes from a
// few families under two namespaces, admission may start past a cached prefix, and a shadow of
// the K/V (a signature of namespace + token prefix written into each physical slot when its
// chunk "runs") proves every reused block holds exactly what the sequence would compute.
// Two more modes: a sliding attention window (blocks before each chunk's window are released,
// the rest of the window is always held, and a sequence never holds more than the window needs)
// and context shifts (long sequences drop tokens after their sinks and go on in bounded memory;
// no shifted K/V is ever served as a prefix hit).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "scheduler/scheduler.h"

namespace kvserve {
namespace {

struct ModelSeq {
  std::vector<int32_t> tokens;  // what the scheduler must hold: prompt + appended tokens
  int64_t computed = 0;         // positions the model says have K/V
  int64_t target_generated = 0; // finishes after sampling this many tokens
  int64_t generated = 0;        // tokens appended so far
  bool done = false;
  bool whole_prompt = false;  // added with compute_whole_prompt: no prefix hit, capped chunks
};

int32_t token_for(SeqId id, size_t pos) { return int32_t((id * 131 + int64_t(pos) * 7) % 1000); }

// What the K/V at position p of a sequence depends on: its namespace and tokens [0, p].
uint64_t kv_signature(const BlockHash& ns, const std::vector<int32_t>& tokens, int64_t p) {
  uint64_t h = 1469598103934665603ull ^ ns.lo;
  for (int64_t i = 0; i <= p; ++i) h = (h ^ uint64_t(uint32_t(tokens[size_t(i)]))) * 1099511628211ull;
  return h;
}

struct RunStats {
  int64_t preemptions = 0;
  int64_t finished = 0;
  int64_t cancelled = 0;
  int64_t hit_tokens = 0;
  int64_t deferred = 0;
  int64_t shifts = 0;
  int64_t released = 0;  // blocks released out of the window (seen as holes)
};

RunStats run_random(uint32_t seed, bool prefix, int64_t window = 0, bool shift = false) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int block_size = std::vector<int>{1, 2, 4, 8}[size_t(uni(0, 3))];
  const int num_blocks = uni(24, 48) / block_size + 2;
  const int64_t capacity = int64_t(num_blocks) * block_size;
  SchedulerConfig cfg;
  cfg.max_seqs = uni(1, 6);
  cfg.max_batched_tokens = uni(1, 24);
  cfg.enable_prefix_cache = prefix;
  cfg.attention_window = window;
  cfg.max_all_logits_chunk = uni(1, 8);
  // Shift mode: a sequence reaching shift_at computed tokens keeps `keep` and drops `discard`.
  const int64_t keep = uni(0, 2 * block_size), discard = int64_t(block_size) * uni(1, 2);
  const int64_t shift_at = keep + discard + block_size * uni(1, 2);
  uint64_t next_rotated = 1;
  KvCacheManager cache(num_blocks, block_size, PrefixCacheOptions{prefix});
  Scheduler sched(cfg, cache);
  std::map<SeqId, ModelSeq> model;
  std::map<SeqId, BlockHash> ns_of;
  std::map<std::pair<int32_t, int32_t>, uint64_t> shadow;  // (block, slot) -> K/V signature
  RunStats rs;
  SeqId next_id = 1;
  const int num_arrivals = 30;
  std::vector<SeqId> arrival_order;  // the FCFS reference

  auto check_step = [&](const ScheduleOutput& out) {
    Status v = sched.verify();
    EXPECT_TRUE(v.ok()) << v.to_string() << " (seed " << seed << ")";
    int64_t sum = 0;
    std::set<SeqId> in_chunks;
    const std::vector<SeqId> running = sched.running_ids();
    const std::set<SeqId> running_set(running.begin(), running.end());
    for (SeqId p : out.preempted) {
      EXPECT_EQ(running_set.count(p), 0u);
      model[p].computed = 0;  // recompute from position 0
      ++rs.preemptions;
    }
    for (const ScheduledChunk& c : out.chunks) {
      sum += c.num_tokens;
      EXPECT_TRUE(in_chunks.insert(c.seq).second) << "two chunks for one sequence";
      EXPECT_EQ(running_set.count(c.seq), 1u) << "chunk of a sequence that is not running";
      ModelSeq& m = model[c.seq];
      if (m.whole_prompt) {
        EXPECT_LE(c.num_tokens, cfg.max_all_logits_chunk) << "seed " << seed;
        EXPECT_FALSE(m.computed == 0 && c.start_pos > 0)
            << "a whole-prompt sequence took a hit (seed " << seed << ")";
      }
      if (prefix && m.computed == 0 && c.start_pos > 0) {
        // Admission past a cached prefix: whole blocks, never the last token, and the shared
        // slots hold this sequence's own K/V.
        EXPECT_EQ(c.start_pos % block_size, 0);
        EXPECT_LT(c.start_pos, int64_t(m.tokens.size()));
        EXPECT_EQ(sched.find(c.seq)->num_cached_tokens, c.start_pos);
        for (int64_t p = int64_t(cache.num_released_blocks(c.seq)) * block_size; p < c.start_pos; ++p) {
          const KvSlot sl = cache.slot(c.seq, p);
          auto it = shadow.find({sl.block, sl.offset});
          ASSERT_TRUE(it != shadow.end()) << "reused slot never written (seed " << seed << ")";
          EXPECT_EQ(it->second, kv_signature(ns_of[c.seq], m.tokens, p)) << "wrong K/V served (seed " << seed << ")";
        }
        rs.hit_tokens += c.start_pos;
        m.computed = c.start_pos;
      }
      EXPECT_EQ(c.start_pos, m.computed) << "chunk does not continue where the cache ends";
      EXPECT_GE(c.num_tokens, 1);
      m.computed += c.num_tokens;
      EXPECT_LE(m.computed, int64_t(m.tokens.size()));
      EXPECT_EQ(c.sample, m.computed == int64_t(m.tokens.size()));
      if (window > 0) {
        // Every block the chunk's windows read is held; nothing before the first one is.
        const int64_t first = std::max<int64_t>(0, c.start_pos + 1 - window) / block_size;
        const std::vector<int32_t>& table = cache.block_table(c.seq);
        EXPECT_EQ(cache.num_released_blocks(c.seq), first) << "seed " << seed;
        for (int64_t b = first; b < int64_t(table.size()); ++b) EXPECT_NE(table[size_t(b)], kNoBlock);
        // O(window) memory: the window, the chunk and one partly filled block at each end.
        EXPECT_LE(cache.num_held_blocks(c.seq), (window + c.num_tokens) / block_size + 2) << "seed " << seed;
        rs.released += first;
      }
    }
    EXPECT_EQ(sum, out.num_batched_tokens);
    EXPECT_LE(sum, cfg.max_batched_tokens);
    EXPECT_LE(int(running.size()), cfg.max_seqs);
    // FCFS: running then waiting, in arrival order, is the arrival order of live sequences.
    std::vector<SeqId> live = running;
    for (SeqId w : sched.waiting_ids()) live.push_back(w);
    std::vector<SeqId> expected;
    for (SeqId id : arrival_order)
      if (!model[id].done) expected.push_back(id);
    EXPECT_EQ(live, expected) << "seed " << seed;
    for (SeqId id : running) EXPECT_EQ(cache.num_tokens(id), model[id].computed);
    // The pass "runs": every scheduled slot gets its K/V.
    for (const ScheduledChunk& c : out.chunks)
      for (int64_t p = c.start_pos; p < c.start_pos + c.num_tokens; ++p) {
        const KvSlot sl = cache.slot(c.seq, p);
        shadow[{sl.block, sl.offset}] = kv_signature(ns_of[c.seq], model[c.seq].tokens, p);
      }
  };

  auto finish = [&](SeqId id, bool cancelled) {
    // Between steps every scheduled chunk has run, so both are correct; false commits less.
    ASSERT_TRUE(sched.remove(id, !cancelled || uni(0, 1) == 0).ok());
    model[id].done = true;
    (cancelled ? rs.cancelled : rs.finished)++;
  };

  int64_t steps = 0;
  while (next_id <= num_arrivals || sched.has_work()) {
    ++steps;
    if (steps > 20000) {
      ADD_FAILURE() << "no progress after 20000 steps (seed " << seed << ")";
      break;
    }
    if (next_id <= num_arrivals && uni(0, 9) < 4) {
      const int prompt_len = uni(1, int(std::min<int64_t>(20, capacity - 1)));
      // Shifting sequences run in bounded memory, so they may generate past the pool's capacity.
      const int gen = shift ? uni(1, 60) : uni(1, int(std::min<int64_t>(15, capacity - prompt_len)));
      ModelSeq m;
      // With the prefix cache, most prompts start with one of three shared prefixes.
      const int family = prefix ? uni(0, 3) : 3;
      const int shared = family < 3 ? uni(0, 16) : 0;
      for (int i = 0; i < prompt_len; ++i)
        m.tokens.push_back(i < shared ? int32_t(5000 + family * 100 + i) : token_for(next_id, size_t(i)));
      m.target_generated = gen;
      const BlockHash ns = prefix ? BlockHash{0, uint64_t(uni(1, 2))} : BlockHash{};
      ns_of[next_id] = ns;
      m.whole_prompt = uni(0, 4) == 0;  // a fifth of the sequences score their prompt
      EXPECT_TRUE(sched.add(next_id, m.tokens, ns, m.whole_prompt).ok());
      model[next_id] = m;
      arrival_order.push_back(next_id);
      ++next_id;
    }
    if (uni(0, 99) < 4) {
      std::vector<SeqId> live;
      for (auto& [id, m] : model)
        if (!m.done) live.push_back(id);
      if (!live.empty()) finish(live[size_t(uni(0, int(live.size()) - 1))], true);
    }
    ScheduleOutput out = sched.schedule();
    check_step(out);
    if (::testing::Test::HasFailure()) break;
    for (const ScheduledChunk& c : out.chunks) {
      if (!c.sample) continue;
      ModelSeq& m = model[c.seq];
      if (m.generated + 1 >= m.target_generated) {
        finish(c.seq, false);  // the sampled token is the last one: nothing more to compute
        continue;
      }
      const int32_t t = token_for(c.seq, m.tokens.size());
      EXPECT_TRUE(sched.append_token(c.seq, t).ok());
      m.tokens.push_back(t);
      ++m.generated;
      if (shift && m.computed >= shift_at) {
        Expected<KvShiftPlan> plan = sched.shift(c.seq, keep, discard);
        if (!plan.ok()) {  // copies of shared blocks did not fit: the engine ends such a request
          EXPECT_EQ(plan.status().code(), StatusCode::kOutOfMemory) << plan.status().to_string();
          EXPECT_EQ(sched.find(c.seq)->tokens, m.tokens) << "a failed shift changed the sequence";
          finish(c.seq, false);
          continue;
        }
        ++rs.shifts;
        for (const KvSlotCopy& cp : plan->copies)
          for (int32_t i = 0; i < cp.num_slots; ++i) shadow[{cp.dst_block, cp.dst_slot + i}] = shadow[{cp.src_block, cp.src_slot + i}];
        for (int64_t p = plan->rotate_begin; p < plan->rotate_end; ++p) {
          const KvSlot sl = cache.slot(c.seq, p);
          shadow[{sl.block, sl.offset}] = next_rotated++;  // no fresh computation yields these
        }
        m.tokens.erase(m.tokens.begin() + keep, m.tokens.begin() + keep + discard);
        m.computed -= discard;
        EXPECT_EQ(sched.find(c.seq)->num_computed, m.computed);
        EXPECT_EQ(cache.num_tokens(c.seq), m.computed);
      }
      // Recompute keeps the exact tokens: the scheduler's copy equals the model's.
      EXPECT_EQ(sched.find(c.seq)->tokens, m.tokens);
    }
    Status v = sched.verify();
    EXPECT_TRUE(v.ok()) << v.to_string();
  }
  EXPECT_EQ(rs.finished + rs.cancelled, num_arrivals) << "seed " << seed;
  EXPECT_EQ(cache.num_blocks_used(), 0);
  EXPECT_EQ(sched.num_preemptions(), rs.preemptions);
  if (!prefix) {
    EXPECT_EQ(cache.index().size(), 0u) << "prefix caching off must hash nothing";
  }
  rs.deferred = sched.num_deferred_admissions();
  return rs;
}

TEST(SchedulerProperty, RandomRunsKeepEveryInvariantAndFinish) {
  int64_t preemptions = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    RunStats rs = run_random(seed, false);
    preemptions += rs.preemptions;
    EXPECT_EQ(rs.hit_tokens, 0);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(preemptions, 0) << "the pools are small enough that some runs must preempt";
}

TEST(SchedulerProperty, RandomRunsWithPrefixCacheKeepEveryInvariantAndFinish) {
  int64_t preemptions = 0, hits = 0, deferred = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    RunStats rs = run_random(seed, true);
    preemptions += rs.preemptions;
    hits += rs.hit_tokens;
    deferred += rs.deferred;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(hits, 0) << "shared prefixes must hit";
  EXPECT_GT(deferred, 0) << "same-prefix arrivals must sometimes wait for a block being computed";
}

TEST(SchedulerProperty, RandomRunsWithAttentionWindowReleaseOldBlocks) {
  int64_t released = 0, hits = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    RunStats rs = run_random(seed, seed % 2 == 0, 1 + seed % 13);
    released += rs.released;
    hits += rs.hit_tokens;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(released, 0) << "windows shorter than the sequences must release blocks";
  EXPECT_GT(hits, 0) << "prefix hits must still work with a window";
}

TEST(SchedulerProperty, RandomRunsWithContextShiftGoOnInBoundedMemory) {
  int64_t shifts = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    RunStats rs = run_random(seed, seed % 2 == 0, 0, true);
    shifts += rs.shifts;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(shifts, 0);
}

}  // namespace
}  // namespace kvserve
