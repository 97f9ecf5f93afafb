// KvCacheManager: which physical blocks each sequence holds, and the prefix cache over them.
// Metadata only: it never touches KvStorage; the model writes token position p of a sequence
// into block block_table(seq)[p / block_size] at slot p % block_size.
//
// Query-then-mutate: every mutation has a const can_X() query that predicts its success
// exactly. A mutation either succeeds completely or returns an error and changes nothing.
// verify() checks every invariant; tests and debug builds run it after each step.
//
// Prefix cache (PrefixCacheOptions::enable_prefix_cache, on by default; see prefix_index.h for
// the index, block_pool.h for the LRU): a sequence's full, computed blocks are committed to the
// index (commit()); when it is freed they stay cached with ref_count 0 and a later sequence with
// the same namespace and token prefix shares them (match_prefix() then allocate(seq, n, match)).
// New blocks come from never-hashed free blocks first, then by evicting the least recently used
// cached block. Only full blocks are shared and nobody writes into a full block, so no
// copy-on-write. With the option off nothing is hashed or indexed and the manager behaves as a
// plain paged allocator; the prefix calls then find nothing and commit nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/block_table.h"
#include "kvcache/kv_cache_stats.h"
#include "kvcache/kv_shift_plan.h"
#include "kvcache/prefix_hash.h"
#include "kvcache/prefix_index.h"
#include "util/status.h"

namespace kvserve {

// Where one token position lives: physical block id and slot within it.
struct KvSlot {
  int32_t block = kNoBlock;
  int32_t offset = 0;
};

struct PrefixCacheOptions {
  bool enable_prefix_cache = true;
  // At most floor(max_pinned_fraction * num_blocks) blocks pinned at once; in [0, 1] (asserted).
  double max_pinned_fraction = 0.20;
  // Pins never leave fewer than this many blocks unpinned (>= 0): the engine passes one
  // full-context sequence's blocks, so a request that fits the context always fits the memory
  // once the others are preempted. (Pinned blocks cannot be evicted: without this, pins could
  // leave a long request waiting forever at the head of the queue, and every request behind it.)
  int32_t min_unpinned_blocks = 0;
  // Block-key function; empty means hash_block (XXH3-128). Tests inject colliding ones.
  BlockHasher hasher{};
  // Time source for block lifetimes; empty means std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> clock{};
};

// The longest run of cached blocks that prefixes some tokens, as found by match_prefix(). Valid
// until the next mutation of the manager (allocate() re-checks it exactly and refuses a stale one).
struct PrefixMatch {
  BlockHash ns;
  std::vector<int32_t> blocks;    // [k] physical ids, logical order
  std::vector<BlockHash> keys;    // [k] chained key of each
  std::vector<uint64_t> serials;  // [k] index serial of each (identifies the exact entry)
  int64_t num_tokens = 0;         // k * block_size
  int64_t query_tokens = 0;       // size of the token list looked up (for the hit-rate stats)
  int32_t num_evictable = 0;      // of `blocks`, those in the free list (ref 0, unpinned)

  int32_t num_blocks() const { return int32_t(blocks.size()); }
  // Chained key of the last matched block: the parent of the next one ({} when k == 0).
  BlockHash last_key() const { return keys.empty() ? BlockHash{} : keys.back(); }
};

class KvCacheManager {
 public:
  using SeqId = int64_t;

  // Asserts num_blocks >= 0, block_size >= 1 and a pin fraction in [0, 1].
  KvCacheManager(int32_t num_blocks, int block_size, PrefixCacheOptions options = {});

  // True when a new sequence of num_tokens (>= 0) tokens fits in the free blocks (cached ones
  // count: they are evicted on demand).
  bool can_allocate(int64_t num_tokens) const;
  // Creates seq holding num_tokens tokens (0 is allowed: an empty table). invalid_argument if
  // seq exists or num_tokens < 0, out_of_memory if too few blocks; nothing changes on error.
  Status allocate(SeqId seq, int64_t num_tokens);

  // ---- prefix cache ----

  bool prefix_cache_enabled() const { return options_.enable_prefix_cache; }
  // The longest chain of cached blocks under ns that prefixes tokens[0, max_tokens) (whole
  // blocks only; max_tokens is clamped to tokens.size()). Touches nothing, counts nothing.
  // Empty (query_tokens still set) when prefix caching is off.
  PrefixMatch match_prefix(const BlockHash& ns, std::span<const int32_t> tokens, int64_t max_tokens) const;
  // The configured block-key function: key of a full block given its parent's key.
  BlockHash block_key(const BlockHash& parent, const BlockHash& ns, std::span<const int32_t> block_tokens) const;
  // True when `match` is still exact and a new sequence starting with its blocks and holding
  // num_tokens (>= match.num_tokens) tokens fits: the new blocks must come from the free list
  // without the matched blocks themselves (taking them would evict what is about to be reused).
  bool can_allocate(const PrefixMatch& match, int64_t num_tokens) const;
  // Creates seq sharing match's blocks (one more reference each) and growing to num_tokens
  // tokens; records one prefix query (match.query_tokens, hit match.num_tokens; none when
  // query_tokens is 0). The sequence
  // then belongs to match.ns for commit(). invalid_argument for an existing seq, num_tokens <
  // match.num_tokens or a stale match; out_of_memory as can_allocate predicts; nothing changes
  // on error.
  Status allocate(SeqId seq, int64_t num_tokens, const PrefixMatch& match);
  // Commits seq's full blocks within tokens (the sequence's token ids whose K/V are written;
  // tokens.size() <= num_tokens(seq)) to the index, chained from its earlier committed blocks.
  // A block whose content is already indexed (same namespace, parent and tokens) under another
  // id stays private but the chain continues through the indexed twin; a colliding key with
  // other content stops the sequence's chain for good (its later blocks are never shared).
  // Idempotent; a no-op when prefix caching is off. not_found for an unknown seq.
  Status commit(SeqId seq, std::span<const int32_t> tokens);
  // Blocks of seq that are committed (its chain length).
  int32_t num_committed_blocks(SeqId seq) const;
  // internal_error unless every indexed block in seq's table holds exactly the matching tokens
  // of `tokens` (the sequence's token ids, at least its committed ones).
  Status check_tokens(SeqId seq, std::span<const int32_t> tokens) const;

  // Pins the cached full blocks of the longest cached prefix of tokens under ns (all full blocks
  // may match here) so they are never evicted; works whether or not sequences hold them. Returns
  // the tokens in pinned blocks; out_of_memory when the pinned-block cap would be exceeded,
  // unsupported when prefix caching is off; nothing changes on error.
  Expected<int64_t> pin_prefix(const BlockHash& ns, std::span<const int32_t> tokens);
  // Drops one pin from each pinned block of that prefix (tail first, so the tail is evicted
  // first once unreferenced). Returns the tokens in blocks that lost a pin. Pins are counts
  // per block: unpin the prompts that were pinned. Unpinning a shorter prompt than a pinned
  // longer one unpins the shared head only; the longer prompt's tail stays pinned and, once
  // its head is evicted, can no longer be reached by prompt: unpin_all() releases everything.
  Expected<int64_t> unpin_prefix(const BlockHash& ns, std::span<const int32_t> tokens);
  // Drops every pin. Returns the blocks that were pinned.
  int32_t unpin_all();
  // Drops every unreferenced, unpinned cached block from the index (it becomes a plain free
  // block). Returns how many.
  int32_t flush();
  PrefixCacheStats prefix_stats() const;
  // Called synchronously on every block event; keep it cheap. Empty to remove.
  void set_event_listener(std::function<void(const CacheEvent&)> listener) { listener_ = std::move(listener); }
  // Seconds from commit to eviction of each block evicted since the last call (at most
  // kMaxPendingLifetimes kept; the oldest are dropped beyond).
  std::vector<double> take_evicted_lifetimes();
  static constexpr size_t kMaxPendingLifetimes = 100000;
  const PrefixIndex& index() const { return index_; }

  // ---- growth and release ----

  // True when seq exists, num_new_tokens >= 0 and the blocks it needs are free.
  bool can_append(SeqId seq, int64_t num_new_tokens) const;
  // Grows seq by num_new_tokens slots, taking blocks as the last one fills. not_found /
  // invalid_argument / out_of_memory as can_append predicts; nothing changes on error.
  Status append_slots(SeqId seq, int64_t num_new_tokens);

  // Drops seq and releases its blocks (each loses one reference), last block first. not_found
  // for an unknown seq, with nothing changed.
  Status free(SeqId seq);

  // ---- attention window and context shift ----

  // Releases seq's blocks that hold only positions before `pos` (logical blocks i with
  // (i + 1) * block_size <= min(pos, num_tokens)): each loses one reference and its table entry
  // becomes a hole (kNoBlock) that nothing may read again. Holes are always a leading run of the
  // table. Committed blocks stay cached for other sequences, as at free(). Returns how many were
  // released now; not_found for an unknown seq.
  Expected<int32_t> release_before(SeqId seq, int64_t pos);
  // Precondition for both: has_seq(seq) (asserted). Leading holes / blocks actually held.
  int32_t num_released_blocks(SeqId seq) const;
  int32_t num_held_blocks(SeqId seq) const;

  // StreamingLLM context shift: seq keeps its first `keep` tokens, drops the `discard` tokens
  // after them, and the rest move down by `discard` positions (same slot offsets, since discard
  // is a multiple of the block size). Blocks wholly discarded are released; the block holding
  // the end of the kept tokens receives the slots that move into it; every block whose content
  // changes (the moved ones, whose keys are re-rotated) is made private first: a block that is
  // shared or pinned is copied to a fresh block (copy-on-write), and one only this sequence
  // holds leaves the prefix index before it is rewritten in place, so no other sequence and no
  // cached prefix ever sees shifted K/V. Blocks it releases keep their cached content. The sequence's committed chain is
  // cut to its unchanged kept blocks and it never commits again (its K/V no longer match what
  // its tokens would compute from scratch). Returns the copies and re-rotation the KV memory
  // needs (kv_shift_plan.h), to be carried out before the next forward pass.
  // invalid_argument unless 0 <= keep, discard >= block_size, discard % block_size == 0,
  // keep + discard <= num_tokens and no block was released by release_before; out_of_memory
  // when the copies need more blocks than are free; nothing changes on error.
  // A block is copied only when another sequence or a pin holds it: a sequence sharing nothing
  // shifts without taking a block.
  Expected<KvShiftPlan> shift(SeqId seq, int64_t keep, int64_t discard);
  // Fresh blocks shift(seq, keep, discard) needs, or the error it would return. (It takes one
  // more when the block holding the end of the kept tokens is cached and a block is spare, to
  // keep that prompt head in the prefix cache.)
  Expected<int32_t> shift_blocks_needed(SeqId seq, int64_t keep, int64_t discard) const;

  bool has_seq(SeqId seq) const { return seqs_.count(seq) != 0; }
  // Precondition for the three below: has_seq(seq) (asserted).
  int64_t num_tokens(SeqId seq) const;
  const std::vector<int32_t>& block_table(SeqId seq) const;
  // Physical location of token position pos, 0 <= pos < num_tokens(seq) (asserted).
  KvSlot slot(SeqId seq, int64_t pos) const;

  int32_t num_blocks_total() const { return pool_.num_blocks_total(); }
  int32_t num_blocks_free() const { return pool_.num_blocks_free(); }
  int32_t num_blocks_used() const { return pool_.num_blocks_used(); }
  int block_size() const { return pool_.block_size(); }
  size_t num_seqs() const { return seqs_.size(); }
  const BlockPool& pool() const { return pool_; }
  KvCacheStats stats() const;

  // Every invariant, in terms of ref counts recomputed from all block tables:
  //  - the pool's own (BlockPool::verify: free list and its segments, counters, ids, pins);
  //  - ids in every table are in range; no table holds a block twice;
  //  - each block's ref_count equals the number of table entries naming it, so a block is
  //    either free (ref 0, listed once) or held by exactly ref_count entries;
  //  - each table has exactly ceil(num_tokens / block_size) entries, of which the first
  //    num_released are holes (kNoBlock) and the others name blocks;
  //  - block i of a table holds min(block_size, num_tokens - i * block_size) tokens;
  //  - the running token total matches the sum over sequences;
  //  - prefix index: every hashed block is indexed exactly once under its hash and every index
  //    entry names a block carrying that hash; each entry's key recomputes from its parent key,
  //    namespace and stored tokens; nothing is hashed when prefix caching is off; pinned blocks
  //    stay within the cap;
  //  - sequence chains: an indexed block in a table lies within the sequence's committed chain
  //    and carries the chain's key and serial at that position;
  //  - the recent-window query sums match the ring.
  // Returns internal_error naming the first violated invariant.
  Status verify() const;

 private:
  friend class KvCacheTestPeer;  // tests corrupt internals to prove verify() catches it

  struct SeqState {
    BlockTable table;
    int64_t num_tokens = 0;
    BlockHash ns;                        // prefix namespace (allocate with a match sets it)
    std::vector<BlockHash> chain_keys;   // [committed blocks] key of logical block i
    std::vector<uint64_t> chain_serials; // [committed blocks] serial of the entry holding it
    bool chain_broken = false;           // a key collision (or a shift) stopped committing
    int32_t num_released = 0;            // leading holes of `table` (release_before)
  };

  // True when a block's content may not change in place: shared or pinned.
  bool needs_copy(int32_t block) const;
  // Drops a block held by one sequence from the prefix index (its content is about to change).
  void unindex_private(int32_t block);
  // A fresh block (evicting the LRU cached one when no plain block is left).
  int32_t take_block();

  // Blocks a sequence at cur_tokens needs to grow by num_new_tokens; -1 when the sum overflows.
  int64_t blocks_to_grow(int64_t cur_tokens, int64_t num_new_tokens) const;
  // Takes blocks (evicting cached ones when no plain block is left) and fills slots so that st
  // goes from st.num_tokens to new_total tokens. Callers have checked num_blocks_free().
  void grow(SeqId seq, SeqState& st, int64_t new_total);
  // Evicts the least recently used cached block: out of the index, into the plain segment.
  void evict_lru();
  // True when every block of m is still indexed under the same serial; counts the ones now in
  // the free list into *evictable.
  bool match_is_current(const PrefixMatch& m, int32_t* evictable) const;
  void record_query(int64_t query_tokens, int64_t hit_tokens);
  void emit(CacheEventKind kind, int64_t seq, std::vector<int32_t> blocks) const;
  std::chrono::steady_clock::time_point now() const;
  int32_t pinned_cap() const;

  PrefixCacheOptions options_;
  BlockPool pool_;
  PrefixIndex index_;
  std::unordered_map<SeqId, SeqState> seqs_;
  int64_t total_tokens_ = 0;  // sum of num_tokens over seqs_

  std::function<void(const CacheEvent&)> listener_;
  int64_t evictions_total_ = 0;
  int64_t queries_total_ = 0, query_tokens_total_ = 0, hit_tokens_total_ = 0;
  // Ring of the last kPrefixStatsWindow queries: [kPrefixStatsWindow] (query, hit) tokens.
  std::vector<std::pair<int64_t, int64_t>> recent_;
  size_t recent_next_ = 0;  // slot the next query overwrites
  int64_t recent_query_tokens_ = 0, recent_hit_tokens_ = 0;
  std::vector<double> evicted_lifetimes_;  // seconds, drained by take_evicted_lifetimes()
};

}  // namespace kvserve
