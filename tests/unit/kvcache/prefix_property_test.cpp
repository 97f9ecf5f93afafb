// Randomized interleavings of the prefix cache's operations: admit with a cached prefix,
// append, commit, finish, cancel, preempt (free + re-admit), pin, unpin, flush, attention-window
// releases, context shifts (with their copy-on-write plans), and evictions under pressure, on small pools, with the real hash and with forced-collision hashes. After
// EVERY operation: verify() passes (ref counts exact, no block leaked or twice free, index and
// LRU consistent), every sequence's indexed blocks hold its own tokens, a failed mutation
// changed nothing and its can_X() predicted it, and the five block states partition the pool.
// A shadow K/V (a signature of namespace + token prefix written into each physical slot when it
// is "computed") proves that every reused block holds what the sequence itself would compute,
// and that no sequence's K/V ever changes under it (a shift rewrites only its own private copies).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace kvserve {
namespace {

using SeqId = KvCacheManager::SeqId;

uint64_t kv_signature(const BlockHash& ns, const std::vector<int32_t>& tokens, int64_t p) {
  uint64_t h = 1469598103934665603ull ^ (ns.lo * 0x9E3779B97F4A7C15ull);
  for (int64_t i = 0; i <= p; ++i) h = (h ^ uint64_t(uint32_t(tokens[size_t(i)]))) * 1099511628211ull;
  return h;
}

BlockHash constant_hash(const BlockHash&, const BlockHash&, std::span<const int32_t>) { return BlockHash{3, 3}; }
BlockHash sum_hash(const BlockHash&, const BlockHash&, std::span<const int32_t> t) {
  uint64_t s = 1;
  for (int32_t x : t) s += uint64_t(x % 4);  // few distinct keys: collisions everywhere
  return BlockHash{0, s};
}

struct Seq {
  std::vector<int32_t> tokens;  // tokens[0, computed) have K/V
  BlockHash ns;
  std::vector<uint64_t> kv;     // [computed] the signature each held position must show
};

// Everything a failed mutation must leave as it was.
struct Snapshot {
  std::vector<std::tuple<int32_t, int32_t, int32_t, uint64_t, uint64_t, bool>> blocks;
  std::vector<int32_t> free_order;
  std::map<SeqId, std::vector<int32_t>> tables;
  size_t index_size = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const KvCacheManager& m, const std::map<SeqId, Seq>& seqs) {
  Snapshot s;
  const BlockPool& p = m.pool();
  for (int32_t i = 0; i < p.num_blocks_total(); ++i) {
    const Block& b = p.block(i);
    s.blocks.emplace_back(b.ref_count, b.pin_count, b.num_tokens, b.hash.hi, b.hash.lo, b.in_free_list);
  }
  for (int32_t id = p.free_head(); id != kNoBlock; id = p.free_next(id)) s.free_order.push_back(id);
  for (const auto& kv : seqs) s.tables[kv.first] = m.block_table(kv.first);
  s.index_size = m.index().size();
  return s;
}

class PrefixCachePropertyTest : public ::testing::TestWithParam<std::tuple<int, int, uint64_t>> {
 protected:
  static constexpr int kNumSteps = 3000;

  void SetUp() override {
    int hasher = 0;
    std::tie(hasher, block_size_, seed_) = GetParam();
    rng_.seed(seed_);
    num_blocks_ = int32_t(uniform(4, 40));
    PrefixCacheOptions opt;
    opt.max_pinned_fraction = 0.25;
    if (hasher == 1) opt.hasher = constant_hash;
    if (hasher == 2) opt.hasher = sum_hash;
    m_ = std::make_unique<KvCacheManager>(num_blocks_, block_size_, opt);
  }

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(int percent) { return uniform(0, 99) < percent; }
  std::string where() const { return "seed " + std::to_string(seed_) + " step " + std::to_string(step_); }

  // A prompt: often one of three shared prefixes (cut anywhere), then its own tokens.
  std::vector<int32_t> random_prompt() {
    std::vector<int32_t> t;
    const int64_t len = uniform(1, 3 * block_size_ + 3);
    const int64_t family = uniform(0, 3);
    const int64_t shared = family < 3 ? uniform(0, len) : 0;
    for (int64_t i = 0; i < len; ++i) t.push_back(i < shared ? int32_t(1000 * (family + 1) + i) : int32_t(uniform(0, 50)));
    return t;
  }
  BlockHash random_ns() { return BlockHash{0, uint64_t(uniform(1, 2))}; }

  SeqId pick() {
    auto it = seqs_.begin();
    std::advance(it, uniform(0, int64_t(seqs_.size()) - 1));
    return it->first;
  }

  void compute(SeqId id, int64_t from, int64_t to) {
    Seq& s = seqs_.at(id);
    if (int64_t(s.kv.size()) < to) s.kv.resize(size_t(to));
    for (int64_t p = from; p < to; ++p) {
      const KvSlot sl = m_->slot(id, p);
      s.kv[size_t(p)] = shadow_[{sl.block, sl.offset}] = kv_signature(s.ns, s.tokens, p);
    }
  }

  // A sliding window's release, or a context shift carried out on the shadow K/V: copies first,
  // then every moved position gets a new signature no fresh computation can produce.
  void window_or_shift(SeqId id) {
    Seq& s = seqs_.at(id);
    const int64_t n = m_->num_tokens(id);
    if (chance(50)) {
      const int32_t released = m_->num_released_blocks(id);
      const int64_t pos = uniform(0, n + 2);
      Expected<int32_t> r = m_->release_before(id, pos);
      ASSERT_TRUE(r.ok()) << where();
      const int32_t expect = std::max<int32_t>(released, int32_t(std::min(pos, n) / block_size_));
      ASSERT_EQ(m_->num_released_blocks(id), expect) << where();
      ASSERT_EQ(*r, expect - released) << where();
      ++ops_[9];
      return;
    }
    const int64_t keep = uniform(0, n), discard = block_size_ * uniform(1, 3);
    const Expected<int32_t> need = m_->shift_blocks_needed(id, keep, discard);
    const int32_t free_before = m_->num_blocks_free();
    const Snapshot before = snapshot(*m_, seqs_);
    Expected<KvShiftPlan> plan = m_->shift(id, keep, discard);
    ASSERT_EQ(plan.ok(), need.ok() && *need <= free_before) << where();
    if (!plan.ok()) {
      ASSERT_TRUE(snapshot(*m_, seqs_) == before) << "failed shift changed the cache, " << where();
      return;
    }
    ++ops_[10];
    ASSERT_EQ(m_->num_tokens(id), n - discard) << where();
    ASSERT_EQ(plan->rotate_begin, keep);
    ASSERT_EQ(plan->rotate_end, n - discard);
    ASSERT_EQ(plan->delta, -discard);
    for (const KvSlotCopy& c : plan->copies)
      for (int32_t i = 0; i < c.num_slots; ++i) {
        auto src = shadow_.find({c.src_block, c.src_slot + i});
        ASSERT_TRUE(src != shadow_.end()) << "a shift copies a slot nobody computed, " << where();
        shadow_[{c.dst_block, c.dst_slot + i}] = src->second;
      }
    s.tokens.erase(s.tokens.begin() + keep, s.tokens.begin() + keep + discard);
    s.kv.erase(s.kv.begin() + keep, s.kv.begin() + keep + discard);
    for (int64_t p = plan->rotate_begin; p < plan->rotate_end; ++p) {
      const KvSlot sl = m_->slot(id, p);
      s.kv[size_t(p)] = shadow_[{sl.block, sl.offset}] = next_rotated_++;
    }
  }

  void commit(SeqId id) {
    const std::vector<int32_t>& t = seqs_.at(id).tokens;
    ASSERT_TRUE(m_->commit(id, std::span<const int32_t>(t.data(), size_t(m_->num_tokens(id)))).ok()) << where();
  }

  // Admits tokens under ns as a new sequence with its cached prefix; false if it did not fit.
  bool admit(SeqId id, const BlockHash& ns, std::vector<int32_t> tokens) {
    const int64_t len = int64_t(tokens.size());
    const PrefixMatch pm = m_->match_prefix(ns, tokens, len - 1);
    EXPECT_EQ(pm.num_tokens % block_size_, 0);
    EXPECT_LT(pm.num_tokens, len);
    for (int64_t p = 0; p < pm.num_tokens; ++p) {
      auto it = shadow_.find({pm.blocks[size_t(p / block_size_)], int32_t(p % block_size_)});
      EXPECT_TRUE(it != shadow_.end() && it->second == kv_signature(ns, tokens, p))
          << "a hit serves K/V of another prefix, " << where();
    }
    hit_tokens_ += pm.num_tokens;
    const int64_t n = uniform(pm.num_tokens + 1, len);
    const bool predicted = m_->can_allocate(pm, n);
    const Snapshot before = snapshot(*m_, seqs_);
    Status st = m_->allocate(id, n, pm);
    EXPECT_EQ(st.ok(), predicted) << st.to_string() << ", " << where();
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << where();
      EXPECT_TRUE(snapshot(*m_, seqs_) == before) << "failed allocate changed the cache, " << where();
      return false;
    }
    seqs_[id] = Seq{std::move(tokens), ns, {}};
    for (int64_t p = 0; p < pm.num_tokens; ++p) seqs_[id].kv.push_back(kv_signature(ns, seqs_[id].tokens, p));
    compute(id, pm.num_tokens, n);
    if (chance(70)) commit(id);
    return true;
  }

  void check() {
    Status v = m_->verify();
    ASSERT_TRUE(v.ok()) << v.to_string() << ", " << where();
    for (const auto& [id, s] : seqs_) {
      ASSERT_EQ(int64_t(s.tokens.size()) >= m_->num_tokens(id), true);
      Status c = m_->check_tokens(id, s.tokens);
      ASSERT_TRUE(c.ok()) << c.to_string() << ", " << where();
      // Every position the sequence still holds shows exactly what it computed (or shifted).
      for (int64_t p = int64_t(m_->num_released_blocks(id)) * block_size_; p < m_->num_tokens(id); ++p) {
        const KvSlot sl = m_->slot(id, p);
        auto it = shadow_.find({sl.block, sl.offset});
        ASSERT_TRUE(it != shadow_.end() && it->second == s.kv[size_t(p)])
            << "sequence " << id << " position " << p << " changed under it, " << where();
      }
    }
    const PrefixCacheStats ps = m_->prefix_stats();
    ASSERT_EQ(ps.blocks_used + ps.blocks_cached + ps.blocks_free + ps.blocks_pinned, ps.blocks_total) << where();
    ASSERT_LE(ps.blocks_pinned, ps.pinned_blocks_cap) << where();
  }

  int32_t num_blocks_ = 0;
  int block_size_ = 1;
  uint64_t seed_ = 0;
  int step_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<KvCacheManager> m_;
  std::map<SeqId, Seq> seqs_;
  std::map<std::pair<int32_t, int32_t>, uint64_t> shadow_;  // (block, slot) -> K/V signature
  std::vector<std::pair<BlockHash, std::vector<int32_t>>> pins_;  // successful pins, to undo
  SeqId next_id_ = 1;
  int64_t hit_tokens_ = 0;
  uint64_t next_rotated_ = 1;  // signatures of shifted positions (kv_signature never yields these small values in practice)
  int ops_[11] = {};
};

TEST_P(PrefixCachePropertyTest, RandomInterleavingsKeepEveryInvariant) {
  int* ops = ops_;
  for (step_ = 0; step_ < kNumSteps; ++step_) {
    const int64_t r = uniform(0, 109);
    if (r < 30 || seqs_.empty()) {  // admit
      ++ops[0];
      admit(next_id_++, random_ns(), random_prompt());
    } else if (r < 55) {  // append (decode or a prefill chunk), sometimes with new tokens
      ++ops[1];
      const SeqId id = pick();
      Seq& s = seqs_.at(id);
      const int64_t k = uniform(0, 2 * block_size_);
      const int64_t cur = m_->num_tokens(id);
      while (int64_t(s.tokens.size()) < cur + k) s.tokens.push_back(int32_t(uniform(0, 50)));
      const bool predicted = m_->can_append(id, k);
      const Snapshot before = snapshot(*m_, seqs_);
      Status st = m_->append_slots(id, k);
      ASSERT_EQ(st.ok(), predicted) << st.to_string() << ", " << where();
      if (st.ok()) {
        compute(id, cur, cur + k);
        if (chance(70)) commit(id);
      } else {
        ASSERT_TRUE(snapshot(*m_, seqs_) == before) << "failed append changed the cache, " << where();
      }
    } else if (r < 67) {  // finish: commit what was computed, release tail first
      ++ops[2];
      const SeqId id = pick();
      commit(id);
      ASSERT_TRUE(m_->free(id).ok());
      seqs_.erase(id);
    } else if (r < 72) {  // cancel without a final commit
      ++ops[3];
      const SeqId id = pick();
      ASSERT_TRUE(m_->free(id).ok());
      seqs_.erase(id);
    } else if (r < 79) {  // preempt: free, then re-admit the same tokens (hits its own blocks)
      ++ops[4];
      const SeqId id = pick();
      Seq s = seqs_.at(id);
      ASSERT_TRUE(m_->free(id).ok());
      seqs_.erase(id);
      if (!s.tokens.empty()) admit(next_id_++, s.ns, s.tokens);
    } else if (r < 86) {  // pin a prefix (cap predicted exactly)
      ++ops[5];
      const std::vector<int32_t> t = chance(50) ? seqs_.at(pick()).tokens : random_prompt();
      const BlockHash ns = random_ns();
      const PrefixMatch pm = m_->match_prefix(ns, t, int64_t(t.size()));
      int32_t newly = 0;
      for (int32_t b : pm.blocks) newly += m_->pool().block(b).pin_count == 0 ? 1 : 0;
      const bool fits = m_->pool().num_blocks_pinned() + newly <= m_->prefix_stats().pinned_blocks_cap;
      const Snapshot before = snapshot(*m_, seqs_);
      Expected<int64_t> pinned = m_->pin_prefix(ns, t);
      ASSERT_EQ(pinned.ok(), fits) << where();
      if (pinned.ok()) {
        ASSERT_EQ(*pinned, pm.num_tokens);
        pins_.push_back({ns, t});
      } else {
        ASSERT_EQ(pinned.status().code(), StatusCode::kOutOfMemory);
        ASSERT_TRUE(snapshot(*m_, seqs_) == before) << "failed pin changed the cache, " << where();
      }
    } else if (r < 93) {  // unpin one earlier pin
      ++ops[6];
      if (!pins_.empty()) {
        const size_t i = size_t(uniform(0, int64_t(pins_.size()) - 1));
        ASSERT_TRUE(m_->unpin_prefix(pins_[i].first, pins_[i].second).ok());
        pins_.erase(pins_.begin() + std::ptrdiff_t(i));
      }
    } else if (r < 95) {  // flush
      ++ops[7];
      const int32_t cached = m_->pool().num_blocks_cached();
      ASSERT_EQ(m_->flush(), cached);
      ASSERT_EQ(m_->pool().num_blocks_cached(), 0);
    } else if (r >= 100) {  // attention-window release or context shift (counted inside)
      window_or_shift(pick());
    } else {  // a burst of plain allocations: eviction pressure
      ++ops[8];
      const SeqId id = next_id_++;
      const int64_t n = uniform(0, int64_t(m_->num_blocks_free()) * block_size_);
      ASSERT_TRUE(m_->allocate(id, n).ok());
      seqs_[id] = Seq{std::vector<int32_t>(size_t(n), 0), random_ns(), {}};
      compute(id, 0, n);  // never committed: these are not prefix tokens
    }
    check();
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
  }
  // Everything returns: free all, drop the pins, flush; every block is plain and free.
  for (const auto& kv : seqs_) ASSERT_TRUE(m_->free(kv.first).ok());
  seqs_.clear();
  for (const auto& [ns, t] : pins_) ASSERT_TRUE(m_->unpin_prefix(ns, t).ok());
  check();
  // Overlapping pins of different lengths may leave a tail pinned (see unpin_prefix).
  const int32_t left = m_->pool().num_blocks_pinned();
  EXPECT_EQ(m_->unpin_all(), left);
  EXPECT_EQ(m_->pool().num_blocks_pinned(), 0);
  check();
  m_->flush();
  EXPECT_EQ(m_->num_blocks_free(), num_blocks_);
  EXPECT_EQ(m_->index().size(), 0u);
  EXPECT_EQ(m_->prefix_stats().blocks_free, num_blocks_);
  for (int i = 0; i < 11; ++i) EXPECT_GT(ops[i], 0) << "operation " << i << " never ran";
  if (std::get<0>(GetParam()) == 0) {
    EXPECT_GT(hit_tokens_, 0) << "shared prefixes must hit";
    EXPECT_GT(m_->prefix_stats().evictions_total, 0) << "small pools must evict";
  }
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, int, uint64_t>>& info) {
  static const char* kHash[] = {"xxh3", "constant", "weak"};
  return std::string(kHash[std::get<0>(info.param)]) + "_bs" + std::to_string(std::get<1>(info.param)) + "_seed" +
         std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Seeds, PrefixCachePropertyTest,
                         ::testing::Combine(::testing::Values(0, 1, 2),  // real, constant, weak hash
                                            ::testing::Values(1, 2, 4),  // block size
                                            ::testing::Values(uint64_t(1), uint64_t(2), uint64_t(3), uint64_t(4))),
                         param_name);

}  // namespace
}  // namespace kvserve
