// KvCacheManager: which physical blocks each sequence holds. Metadata only: it never touches
// KvStorage; the model writes token position p of a sequence into block
// block_table(seq)[p / block_size] at slot p % block_size.
//
// Query-then-mutate: every mutation has a const can_X() query that predicts its success
// exactly. A mutation either succeeds completely or returns an error and changes nothing.
// verify() checks every invariant; tests and debug builds run it after each step.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/block_table.h"
#include "kvcache/kv_cache_stats.h"
#include "util/status.h"

namespace kvserve {

// Where one token position lives: physical block id and slot within it.
struct KvSlot {
  int32_t block = kNoBlock;
  int32_t offset = 0;
};

class KvCacheManager {
 public:
  using SeqId = int64_t;

  // Asserts num_blocks >= 0 and block_size >= 1.
  KvCacheManager(int32_t num_blocks, int block_size);

  // True when a new sequence of num_tokens (>= 0) tokens fits in the free blocks.
  bool can_allocate(int64_t num_tokens) const;
  // Creates seq holding num_tokens tokens (0 is allowed: an empty table). invalid_argument if
  // seq exists or num_tokens < 0, out_of_memory if too few blocks; nothing changes on error.
  Status allocate(SeqId seq, int64_t num_tokens);

  // True when seq exists, num_new_tokens >= 0 and the blocks it needs are free.
  bool can_append(SeqId seq, int64_t num_new_tokens) const;
  // Grows seq by num_new_tokens slots, taking blocks as the last one fills. not_found /
  // invalid_argument / out_of_memory as can_append predicts; nothing changes on error.
  Status append_slots(SeqId seq, int64_t num_new_tokens);

  // Drops seq and releases its blocks (each loses one reference). not_found for an unknown
  // seq, with nothing changed.
  Status free(SeqId seq);

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
  //  - the pool's own (BlockPool::verify: free list, counters, ids);
  //  - ids in every table are in range; no table holds a block twice;
  //  - each block's ref_count equals the number of table entries naming it, so a block is
  //    either free (ref 0, listed once) or held by exactly ref_count entries;
  //  - each table has exactly ceil(num_tokens / block_size) blocks;
  //  - block i of a table holds min(block_size, num_tokens - i * block_size) tokens;
  //  - the running token total matches the sum over sequences.
  // Returns internal_error naming the first violated invariant.
  Status verify() const;

 private:
  friend class KvCacheTestPeer;  // tests corrupt internals to prove verify() catches it

  struct SeqState {
    BlockTable table;
    int64_t num_tokens = 0;
  };

  // Blocks a sequence at cur_tokens needs to grow by num_new_tokens; -1 when the sum overflows.
  int64_t blocks_to_grow(int64_t cur_tokens, int64_t num_new_tokens) const;
  // Takes blocks and fills slots so that st goes from st.num_tokens to new_total tokens.
  // Callers have checked that enough blocks are free.
  void grow(SeqState& st, int64_t new_total);

  BlockPool pool_;
  std::unordered_map<SeqId, SeqState> seqs_;
  int64_t total_tokens_ = 0;  // sum of num_tokens over seqs_
};

}  // namespace kvserve
