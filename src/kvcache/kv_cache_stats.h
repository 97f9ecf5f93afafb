// Snapshots of KV cache occupancy and prefix-cache activity, for metrics and logs, and the
// block-level events the cache reports to an optional listener (kvcache itself never logs).
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve {

struct KvCacheStats {
  int32_t num_blocks_total = 0;
  int32_t num_blocks_used = 0;  // not in the free list: referenced or pinned
  int32_t num_blocks_free = 0;  // in the free list (plain or cached-evictable)
  int64_t num_seqs = 0;
  int64_t num_tokens = 0;  // tokens held, summed over sequences
  int block_size = 0;

  // Fraction of blocks in use, 0 for an empty pool.
  double usage() const { return num_blocks_total > 0 ? double(num_blocks_used) / num_blocks_total : 0.0; }
};

// Prefix-cache view of the pool. The five block states partition the pool (they sum to
// blocks_total), so they can be exported as one gauge with a state label:
//   pinned: pin_count > 0 (referenced or not; never evicted)
//   used:   referenced by a sequence and not pinned
//   cached: ref_count 0, unpinned, still in the prefix index (reusable, evictable, LRU order)
//   free:   ref_count 0, no hash (content dead)
// Queries and hits count tokens: one query per admission of a sequence, of all its tokens; the
// hit is the cached prefix it reused. "recent" sums cover the last kPrefixStatsWindow queries.
inline constexpr int kPrefixStatsWindow = 1000;

struct PrefixCacheStats {
  int32_t blocks_total = 0, blocks_used = 0, blocks_cached = 0, blocks_free = 0, blocks_pinned = 0;
  int64_t evictions_total = 0;  // cached blocks reclaimed for new allocations (flush not counted)
  int64_t query_tokens_total = 0, hit_tokens_total = 0;    // since start
  int64_t recent_query_tokens = 0, recent_hit_tokens = 0;  // last kPrefixStatsWindow queries
  int64_t queries_total = 0;    // admissions looked up since start
  int32_t recent_queries = 0;   // queries in the recent window (<= kPrefixStatsWindow)
  int32_t pinned_blocks_cap = 0;  // most blocks that may be pinned at once
  bool enabled = false;

  // Token hit rates in [0, 1]; 0 when nothing was queried.
  double hit_rate_total() const { return query_tokens_total > 0 ? double(hit_tokens_total) / query_tokens_total : 0.0; }
  double hit_rate_recent() const {
    return recent_query_tokens > 0 ? double(recent_hit_tokens) / recent_query_tokens : 0.0;
  }
};

enum class CacheEventKind : uint8_t {
  kAllocated,  // fresh blocks taken by a sequence (allocate / append)
  kReused,     // cached blocks a new sequence shares (prefix hit)
  kFreed,      // blocks a finished or preempted sequence released (tail first)
  kCommitted,  // full computed blocks entered the prefix index
  kEvicted,    // a cached block left the index to be reused
  kPinned,     // blocks whose pin_count went up
  kUnpinned,   // blocks whose pin_count went down
  kFlushed,    // unreferenced cached blocks dropped from the index by flush()
  kReleased,   // blocks that fell out of a sequence's attention window (release_before)
  kShifted,    // blocks a context shift released (the discarded tokens, replaced copies)
};

inline const char* cache_event_name(CacheEventKind k) {
  switch (k) {
    case CacheEventKind::kAllocated: return "allocated";
    case CacheEventKind::kReused: return "reused";
    case CacheEventKind::kFreed: return "freed";
    case CacheEventKind::kCommitted: return "committed";
    case CacheEventKind::kEvicted: return "evicted";
    case CacheEventKind::kPinned: return "pinned";
    case CacheEventKind::kUnpinned: return "unpinned";
    case CacheEventKind::kFlushed: return "flushed";
    case CacheEventKind::kReleased: return "released";
    case CacheEventKind::kShifted: return "shifted";
  }
  return "unknown";
}

struct CacheEvent {
  CacheEventKind kind = CacheEventKind::kAllocated;
  int64_t seq = -1;             // the sequence concerned, -1 for none (evict, pin, flush)
  std::vector<int32_t> blocks;  // physical block ids, in the order they were handled
};

}  // namespace kvserve
