// BlockPool: metadata for every physical KV block (no pointers into KvStorage, ids only) and the
// free list.
//
// The free list is an intrusive doubly linked list threaded through Block::prev/next, so
// removing any block from it, or moving it, is O(1). It holds every block with ref_count 0 that
// is not pinned, in two segments, and allocate() takes the head:
//
//   head -> [plain: no hash, content dead, FIFO by release] -> [cached: hashed, LRU order] <- tail
//
// A released block without a hash joins the end of the plain segment; one with a hash (a full
// block in the prefix index) joins the very tail, so the first cached block is the least
// recently used one: the eviction victim once no plain block is left. A prefix-cache hit on a
// ref-0 block unlinks it from anywhere (ref()), and its next release puts it back at the tail:
// that is the LRU touch. The pool knows nothing of the index: the KvCacheManager removes a
// victim from its index and calls drop_hash() before allocate() may take it.
//
// Pinned blocks (pin_count > 0, always hashed) are out of the list even at ref_count 0, so they
// are never evicted.
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"

namespace kvserve {

inline constexpr int32_t kNoBlock = -1;

// Content hash of a full block, chained from its parent's. {0, 0} means "no hash" (the block is
// not, or not yet, in a prefix index).
struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool empty() const { return hi == 0 && lo == 0; }
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct Block {
  int32_t id = kNoBlock;
  int32_t ref_count = 0;   // sequences (block-table entries) holding this block
  int32_t pin_count = 0;   // pins (KvCacheManager::pin_prefix); > 0 keeps it out of the free list
  int32_t num_tokens = 0;  // filled slots, 0..block_size
  BlockHash hash;          // set while the block is in the prefix index
  // Free-list links; meaningful only while in_free_list.
  int32_t prev = kNoBlock;
  int32_t next = kNoBlock;
  bool in_free_list = false;
};

class BlockPool {
 public:
  // All blocks start free (plain), in id order. Asserts num_blocks >= 0 and block_size >= 1.
  BlockPool(int32_t num_blocks, int block_size);

  int32_t num_blocks_total() const { return int32_t(blocks_.size()); }
  // Blocks in the free list: plain ones plus cached (evictable) ones.
  int32_t num_blocks_free() const { return num_free_; }
  // Not in the free list: referenced or pinned.
  int32_t num_blocks_used() const { return num_blocks_total() - num_free_; }
  // Free-list blocks that carry a hash (ref 0, unpinned, still in the prefix index).
  int32_t num_blocks_cached() const { return num_cached_; }
  // Free-list blocks without a hash: allocate() takes these without evicting anything.
  int32_t num_blocks_plain_free() const { return num_free_ - num_cached_; }
  // Blocks with pin_count > 0.
  int32_t num_blocks_pinned() const { return num_pinned_; }
  int block_size() const { return block_size_; }

  const Block& block(int32_t id) const;
  bool is_free(int32_t id) const { return block(id).in_free_list; }

  // Takes the head of the free list, with ref_count 1, num_tokens 0 and no hash. Asserts a block
  // is free and that the head is plain (a cached head must be evicted through drop_hash() first).
  int32_t allocate();
  // One more holder. A ref-0 block is unlinked from the free list (prefix-cache hit).
  void ref(int32_t id);
  // One holder fewer. At 0 (and unpinned) the block rejoins the free list: a hashed one at the
  // tail (most recently used), a plain one at the end of the plain segment with num_tokens reset
  // to 0 (its content is dead). Asserts ref_count > 0.
  void release(int32_t id);
  void set_num_tokens(int32_t id, int32_t num_tokens);

  // Marks a referenced, full, unhashed block as indexed under `hash` (non-empty). Asserted.
  void set_hash(int32_t id, const BlockHash& hash);
  // Forgets a block's hash (eviction, flush). A free one moves to the end of the plain segment
  // with num_tokens 0. Asserts the block is hashed and unpinned.
  void drop_hash(int32_t id);
  // Pins a hashed block (unlinking it if free) / unpins it (a ref-0 block rejoins the tail).
  void pin(int32_t id);
  void unpin(int32_t id);

  // Free-list traversal, head (next to be allocated / evicted) first; kNoBlock ends it.
  int32_t free_head() const { return head_; }
  int32_t free_next(int32_t id) const { return block(id).next; }
  // The least recently used cached block (first of the cached segment), or kNoBlock.
  int32_t lru_head() const { return plain_tail_ == kNoBlock ? head_ : block(plain_tail_).next; }

  // The pool's own invariants: ids match positions, ref and pin counts non-negative, a block is
  // in the free list iff its ref_count and pin_count are 0, the list is well linked (no cycle,
  // prev/next agree, head/tail right), each free block appears exactly once, plain blocks all
  // precede cached ones and the plain tail is right, the free/cached/pinned counters match,
  // pinned blocks are hashed, hashed blocks are full, and free blocks without a hash hold no
  // tokens. Names the first violation.
  Status verify() const;

 private:
  friend class KvCacheTestPeer;  // tests corrupt internals to prove verify() catches it

  void link_tail(int32_t id);   // append to the cached segment (the very tail)
  void link_plain(int32_t id);  // append to the plain segment (after plain_tail_)
  void link_released(int32_t id);
  void unlink(int32_t id);
  Block& mut(int32_t id);

  int block_size_;
  std::vector<Block> blocks_;      // [num_blocks], blocks_[i].id == i
  int32_t head_ = kNoBlock;        // free list ends
  int32_t tail_ = kNoBlock;
  int32_t plain_tail_ = kNoBlock;  // last block of the plain segment, kNoBlock when it is empty
  int32_t num_free_ = 0;
  int32_t num_cached_ = 0;         // hashed blocks in the free list
  int32_t num_pinned_ = 0;         // blocks with pin_count > 0
};

}  // namespace kvserve
