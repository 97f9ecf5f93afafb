// BlockPool: metadata for every physical KV block (no pointers into KvStorage, ids only) and the
// free list.
//
// The free list is an intrusive doubly linked list threaded through Block::prev/next, so
// removing any block from it, or moving it, is O(1). It is ordered by release time: release()
// appends at the tail, allocate() takes the head. When the prefix cache arrives, a released block
// keeps its hash and stays reusable while it sits in this list; the head is then the least
// recently used block, i.e. the eviction victim, and a cache hit on a free block unlinks it
// (ref() of a ref-0 block) without a search.
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
  int32_t num_tokens = 0;  // filled slots, 0..block_size
  BlockHash hash;
  // Free-list links; meaningful only while in_free_list.
  int32_t prev = kNoBlock;
  int32_t next = kNoBlock;
  bool in_free_list = false;
};

class BlockPool {
 public:
  // All blocks start free, in id order. Asserts num_blocks >= 0 and block_size >= 1.
  BlockPool(int32_t num_blocks, int block_size);

  int32_t num_blocks_total() const { return int32_t(blocks_.size()); }
  int32_t num_blocks_free() const { return num_free_; }
  int32_t num_blocks_used() const { return num_blocks_total() - num_free_; }
  int block_size() const { return block_size_; }

  const Block& block(int32_t id) const;
  bool is_free(int32_t id) const { return block(id).in_free_list; }

  // Takes the head of the free list (least recently released), with ref_count 1, num_tokens 0
  // and no hash. Asserts a block is free: callers check num_blocks_free() first.
  int32_t allocate();
  // One more holder. A ref-0 block is unlinked from the free list (prefix-cache hit).
  void ref(int32_t id);
  // One holder fewer. At 0 the block goes to the free-list tail; without a hash its content
  // is dead, so num_tokens resets to 0. Asserts ref_count > 0.
  void release(int32_t id);
  void set_num_tokens(int32_t id, int32_t num_tokens);

  // Free-list traversal, head (next to be allocated / evicted) first; kNoBlock ends it.
  int32_t free_head() const { return head_; }
  int32_t free_next(int32_t id) const { return block(id).next; }

  // The pool's own invariants: ids match positions, ref counts non-negative, a block is in
  // the free list iff its ref_count is 0, the list is well linked (no cycle, prev/next agree,
  // head/tail right), each free block appears exactly once, the free counter matches, and
  // free blocks without a hash hold no tokens. Names the first violation.
  Status verify() const;

 private:
  friend class KvCacheTestPeer;  // tests corrupt internals to prove verify() catches it

  void link_tail(int32_t id);
  void unlink(int32_t id);
  Block& mut(int32_t id);

  int block_size_;
  std::vector<Block> blocks_;  // [num_blocks], blocks_[i].id == i
  int32_t head_ = kNoBlock;    // free list ends
  int32_t tail_ = kNoBlock;
  int32_t num_free_ = 0;
};

}  // namespace kvserve
