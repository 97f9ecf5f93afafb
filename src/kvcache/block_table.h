// BlockTable: one sequence's logical -> physical block map. Logical block i holds token positions
// [i * block_size, (i + 1) * block_size); ids()[i] is the physical block (a KvStorage index), or
// kNoBlock for a leading block released because it fell out of the attention window.
#pragma once

#include <cstdint>
#include <vector>

#include <utility>

#include "kvcache/block_pool.h"
#include "util/status.h"

namespace kvserve {

// Blocks needed for num_tokens tokens: ceil(num_tokens / block_size), overflow-free.
inline int64_t num_blocks_for(int64_t num_tokens, int block_size) {
  return num_tokens / block_size + (num_tokens % block_size != 0 ? 1 : 0);
}

class BlockTable {
 public:
  const std::vector<int32_t>& ids() const { return ids_; }
  int32_t num_blocks() const { return int32_t(ids_.size()); }
  bool empty() const { return ids_.empty(); }
  int32_t operator[](int32_t logical) const {
    KVS_ASSERT(logical >= 0 && logical < num_blocks(), "logical block out of range");
    return ids_[size_t(logical)];
  }

  void push_back(int32_t block_id) { ids_.push_back(block_id); }
  // Replaces one entry (kNoBlock makes it a hole: a block released out of the attention window).
  void set(int32_t logical, int32_t block_id) {
    KVS_ASSERT(logical >= 0 && logical < num_blocks(), "logical block out of range");
    ids_[size_t(logical)] = block_id;
  }
  // Replaces the whole map (a context shift renumbers the blocks).
  void assign(std::vector<int32_t> ids) { ids_ = std::move(ids); }
  void pop_back() { ids_.pop_back(); }
  void clear() { ids_.clear(); }
  // Makes room for n more entries so a following push_back run cannot throw midway.
  void reserve_more(int32_t n) { ids_.reserve(ids_.size() + size_t(n)); }

 private:
  friend class KvCacheTestPeer;
  std::vector<int32_t> ids_;  // [num_blocks] physical ids, in logical order
};

}  // namespace kvserve
