// Randomized property tests of KvCacheManager against a trivial model (seq -> token count).
// After EVERY operation: verify() passes, the cache agrees with the model, a failed mutation
// left the whole cache (tables, ref counts, free-list order) bit-identical, and can_X() predicted
// X's outcome exactly. Seeds are fixed; the gtest parameter name and every failure message carry
// (num_blocks, block_size, seed, step) so a failure reproduces by filtering on that name.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace kvserve {
namespace {

using SeqId = KvCacheManager::SeqId;

// Everything observable about a cache, for "a failed mutation changed nothing". Taken only
// before a mutation predicted to fail: a wrong prediction fails the test anyway.
struct Snapshot {
  std::map<SeqId, std::pair<int64_t, std::vector<int32_t>>> seqs;  // seq -> (tokens, table)
  std::vector<std::tuple<int32_t, int32_t, int32_t, uint64_t, uint64_t, bool>> blocks;
  std::vector<int32_t> free_order;  // head first
  size_t num_seqs = 0;
  int64_t num_tokens = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const KvCacheManager& m, const std::map<SeqId, int64_t>& model, SeqId extra) {
  Snapshot s;
  auto add = [&](SeqId seq) {
    if (m.has_seq(seq)) s.seqs[seq] = {m.num_tokens(seq), m.block_table(seq)};
  };
  for (const auto& kv : model) add(kv.first);
  add(extra);
  const BlockPool& p = m.pool();
  for (int32_t i = 0; i < p.num_blocks_total(); ++i) {
    const Block& b = p.block(i);
    s.blocks.emplace_back(b.id, b.ref_count, b.num_tokens, b.hash.hi, b.hash.lo, b.in_free_list);
  }
  for (int32_t id = p.free_head(); id != kNoBlock; id = p.free_next(id)) s.free_order.push_back(id);
  s.num_seqs = m.num_seqs();
  s.num_tokens = m.stats().num_tokens;
  return s;
}

struct Coverage {
  int allocate_ok = 0, allocate_failed = 0, append_ok = 0, append_failed = 0, free_ok = 0, free_failed = 0;
};

class KvCachePropertyTest : public ::testing::TestWithParam<std::tuple<int32_t, int, uint64_t>> {
 protected:
  static constexpr int kNumSteps = 3000;

  void SetUp() override {
    std::tie(num_blocks_, block_size_, seed_) = GetParam();
    rng_.seed(seed_);
  }

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(int percent) { return uniform(0, 99) < percent; }

  SeqId pick_existing_or_unknown() {
    if (model_.empty() || chance(10)) return 1'000'000 + uniform(0, 1000);  // never allocated
    auto it = model_.begin();
    std::advance(it, uniform(0, int64_t(model_.size()) - 1));
    return it->first;
  }

  int64_t random_allocation_size() {
    const int64_t bs = block_size_;
    int64_t r = uniform(0, 99);
    if (r < 10) return 0;
    if (r < 30) return bs * uniform(1, 4);  // exact multiples
    if (r < 40) return bs * uniform(1, 4) + (chance(50) ? 1 : -1);
    if (r < 90) return uniform(1, 3 * bs + 40);
    if (r < 95) return (int64_t(num_blocks_) + 1) * bs;  // never fits
    return -uniform(1, 5);                               // invalid
  }

  int64_t random_append_size(SeqId seq) {
    int64_t r = uniform(0, 99);
    if (r < 80) return uniform(1, 40);
    if (r < 85) return 0;
    if (r < 90) return -uniform(1, 3);
    if (r < 95)
      return chance(50) ? std::numeric_limits<int64_t>::max() - uniform(0, 2)
                        : (int64_t(num_blocks_) + 1) * block_size_;
    // Exactly up to the next block boundary.
    int64_t cur = model_.count(seq) ? model_[seq] : 0;
    return block_size_ - cur % block_size_;
  }

  // The cache agrees with the model and verify() passes.
  void check_state(const KvCacheManager& m) {
    Status s = m.verify();
    ASSERT_TRUE(s.ok()) << s.to_string();
    int64_t blocks = 0, tokens = 0;
    for (const auto& [seq, n] : model_) {
      ASSERT_TRUE(m.has_seq(seq)) << "seq " << seq;
      ASSERT_EQ(m.num_tokens(seq), n) << "seq " << seq;
      ASSERT_EQ(int64_t(m.block_table(seq).size()), num_blocks_for(n, block_size_)) << "seq " << seq;
      blocks += num_blocks_for(n, block_size_);
      tokens += n;
    }
    ASSERT_EQ(m.num_seqs(), model_.size());
    ASSERT_EQ(m.num_blocks_used(), blocks);
    ASSERT_EQ(m.num_blocks_free(), num_blocks_ - blocks);
    KvCacheStats st = m.stats();
    ASSERT_EQ(st.num_tokens, tokens);
    ASSERT_EQ(st.num_blocks_used + st.num_blocks_free, st.num_blocks_total);
  }

  void step_allocate(KvCacheManager& m, Coverage& cov) {
    SeqId seq = (!model_.empty() && chance(10)) ? model_.begin()->first : next_seq_++;
    int64_t n = random_allocation_size();
    // can_allocate() is about space only; an existing id is the caller's own error.
    bool predicted = m.can_allocate(n) && !m.has_seq(seq);
    ASSERT_EQ(m.can_allocate(n), n >= 0 && num_blocks_for(n, block_size_) <= m.num_blocks_free());
    Snapshot before = predicted ? Snapshot{} : snapshot(m, model_, seq);
    Status s = m.allocate(seq, n);
    ASSERT_EQ(s.ok(), predicted) << "allocate(" << seq << ", " << n << "): " << s.to_string();
    if (s.ok()) {
      model_[seq] = n;
      ++cov.allocate_ok;
    } else {
      ASSERT_TRUE(snapshot(m, model_, seq) == before) << "failed allocate changed the cache";
      ++cov.allocate_failed;
    }
  }

  void step_append(KvCacheManager& m, Coverage& cov) {
    SeqId seq = pick_existing_or_unknown();
    int64_t n = random_append_size(seq);
    bool predicted = m.can_append(seq, n);
    Snapshot before = predicted ? Snapshot{} : snapshot(m, model_, seq);
    Status s = m.append_slots(seq, n);
    ASSERT_EQ(s.ok(), predicted) << "append_slots(" << seq << ", " << n << "): " << s.to_string();
    if (s.ok()) {
      model_[seq] += n;
      ++cov.append_ok;
    } else {
      ASSERT_TRUE(snapshot(m, model_, seq) == before) << "failed append changed the cache";
      ++cov.append_failed;
    }
  }

  void step_free(KvCacheManager& m, Coverage& cov) {
    SeqId seq = pick_existing_or_unknown();
    bool predicted = m.has_seq(seq);
    Snapshot before = predicted ? Snapshot{} : snapshot(m, model_, seq);
    Status s = m.free(seq);
    ASSERT_EQ(s.ok(), predicted) << "free(" << seq << "): " << s.to_string();
    if (s.ok()) {
      model_.erase(seq);
      ++cov.free_ok;
    } else {
      ASSERT_TRUE(snapshot(m, model_, seq) == before) << "failed free changed the cache";
      ++cov.free_failed;
    }
  }

  // Queries change nothing and map positions as documented.
  void step_query(const KvCacheManager& m) {
    if (model_.empty()) return;
    SeqId seq = pick_existing_or_unknown();
    if (!m.has_seq(seq)) {
      ASSERT_FALSE(model_.count(seq));
      ASSERT_FALSE(m.can_append(seq, 0));
      return;
    }
    int64_t n = m.num_tokens(seq);
    if (n == 0) return;
    int64_t pos = uniform(0, n - 1);
    KvSlot slot = m.slot(seq, pos);
    ASSERT_EQ(slot.block, m.block_table(seq)[size_t(pos / block_size_)]);
    ASSERT_EQ(slot.offset, pos % block_size_);
    ASSERT_EQ(m.pool().block(slot.block).ref_count, 1);  // nothing is shared yet
  }

  void run(Coverage& cov) {
    KvCacheManager m(num_blocks_, block_size_);
    ASSERT_NO_FATAL_FAILURE(check_state(m));
    for (int step = 0; step < kNumSteps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      int64_t r = uniform(0, 99);
      if (r < 30)
        ASSERT_NO_FATAL_FAILURE(step_allocate(m, cov));
      else if (r < 65)
        ASSERT_NO_FATAL_FAILURE(step_append(m, cov));
      else if (r < 85)
        ASSERT_NO_FATAL_FAILURE(step_free(m, cov));
      else
        ASSERT_NO_FATAL_FAILURE(step_query(m));
      ASSERT_NO_FATAL_FAILURE(check_state(m));
    }
    // Freeing everything returns every block.
    while (!model_.empty()) {
      ASSERT_TRUE(m.free(model_.begin()->first).ok());
      model_.erase(model_.begin());
      ASSERT_NO_FATAL_FAILURE(check_state(m));
    }
    EXPECT_EQ(m.num_blocks_free(), num_blocks_);
    EXPECT_EQ(m.num_seqs(), 0u);
    EXPECT_EQ(snapshot(m, model_, 0).free_order.size(), size_t(num_blocks_));
  }

  int32_t num_blocks_ = 0;
  int block_size_ = 1;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::map<SeqId, int64_t> model_;  // the reference: seq -> token count
  SeqId next_seq_ = 1;
};

TEST_P(KvCachePropertyTest, RandomOperationsKeepEveryInvariant) {
  SCOPED_TRACE("num_blocks=" + std::to_string(num_blocks_) + " block_size=" + std::to_string(block_size_) +
               " seed=" + std::to_string(seed_));
  Coverage cov;
  ASSERT_NO_FATAL_FAILURE(run(cov));
  // Not vacuous: on a pool big enough to matter, every mutation both succeeded and failed.
  if (num_blocks_ >= 16) {
    EXPECT_GT(cov.allocate_ok, 0);
    EXPECT_GT(cov.allocate_failed, 0);
    EXPECT_GT(cov.append_ok, 0);
    EXPECT_GT(cov.append_failed, 0);
    EXPECT_GT(cov.free_ok, 0);
    EXPECT_GT(cov.free_failed, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, KvCachePropertyTest,
                         ::testing::Combine(::testing::Values<int32_t>(0, 1, 3, 16, 100, 400),
                                            ::testing::Values(1, 16, 32),
                                            ::testing::Values<uint64_t>(1, 2, 3, 42, 1234, 987654321)),
                         [](const ::testing::TestParamInfo<KvCachePropertyTest::ParamType>& info) {
                           return "blocks" + std::to_string(std::get<0>(info.param)) + "_bs" +
                                  std::to_string(std::get<1>(info.param)) + "_seed" +
                                  std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace kvserve
