// Test-only access to kvcache internals: lets tests break one invariant at a time and check
// that verify() reports it, so the property tests cannot pass with a verify() that checks
// nothing. Also lets a test share a block between two sequences the way the prefix cache will.
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/kv_cache_manager.h"

namespace kvserve {

class KvCacheTestPeer {
 public:
  static Block& block(KvCacheManager& m, int32_t id) { return m.pool_.blocks_[size_t(id)]; }
  static int32_t& num_free(KvCacheManager& m) { return m.pool_.num_free_; }
  static int32_t& free_head(KvCacheManager& m) { return m.pool_.head_; }
  static int32_t& free_tail(KvCacheManager& m) { return m.pool_.tail_; }
  static std::vector<int32_t>& table(KvCacheManager& m, KvCacheManager::SeqId seq) {
    return m.seqs_.at(seq).table.ids_;
  }
  static int64_t& seq_tokens(KvCacheManager& m, KvCacheManager::SeqId seq) {
    return m.seqs_.at(seq).num_tokens;
  }
  static int64_t& total_tokens(KvCacheManager& m) { return m.total_tokens_; }
  // Makes seq's logical block `logical` point at `block`, moving the references consistently
  // (the old block loses one, the new one gains one), as a prefix-cache hit would.
  static void share_block(KvCacheManager& m, KvCacheManager::SeqId seq, int32_t logical, int32_t block) {
    std::vector<int32_t>& ids = table(m, seq);
    m.pool_.ref(block);
    m.pool_.release(ids[size_t(logical)]);
    ids[size_t(logical)] = block;
  }
  static void set_hash(KvCacheManager& m, int32_t id, BlockHash h) { m.pool_.blocks_[size_t(id)].hash = h; }
  static int32_t& plain_tail(KvCacheManager& m) { return m.pool_.plain_tail_; }
  static int32_t& num_cached(KvCacheManager& m) { return m.pool_.num_cached_; }
  static int32_t& num_pinned(KvCacheManager& m) { return m.pool_.num_pinned_; }
  static PrefixIndex& index(KvCacheManager& m) { return m.index_; }
  static int32_t* index_tokens(KvCacheManager& m, int32_t block) {
    return m.index_.tokens_.data() + size_t(block) * size_t(m.block_size());
  }
  static std::vector<uint64_t>& chain_serials(KvCacheManager& m, KvCacheManager::SeqId seq) {
    return m.seqs_.at(seq).chain_serials;
  }
  static int64_t& recent_hit_tokens(KvCacheManager& m) { return m.recent_hit_tokens_; }
};

}  // namespace kvserve
