// PrefixIndex: key -> physical block for the full blocks in the prefix cache, plus what a hit
// must compare besides the key, so that no hash collision can ever serve another prefix's K/V.
//
// Each indexed block keeps:
//  - its key (the chained XXH3-128 of prefix_hash.h) and its parent's key (for verify());
//  - the namespace it was computed under;
//  - a copy of its token ids;
//  - a serial number unique over the index's lifetime (never reused), and its parent's serial.
// A lookup walks a prompt block by block from the root; block i hits only if the entry under
// its key has the same namespace, the same token ids and, as parent serial, the serial of the
// entry block i-1 just hit (0 for block 0). By induction a hit at block i means the whole
// prefix [0, (i + 1) * block_size) equals the one the entry was computed from, whatever the hash
// function does. (Comparing parent keys instead would not do: a parent evicted and replaced by a
// colliding block would make its orphaned children look like children of the newcomer.)
//
// Storage: per-block arrays sized at construction; tokens_ is [num_blocks][block_size]. One key
// maps to at most one block: a second block with the same key is not indexed.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/prefix_hash.h"

namespace kvserve {

class PrefixIndex {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Sized for num_blocks blocks (0 when nothing will ever be indexed).
  PrefixIndex(int32_t num_blocks, int block_size);

  // The block indexed under key, or kNoBlock.
  int32_t find(const BlockHash& key) const;
  // True when indexed `block` holds exactly this content: namespace, parent serial, tokens.
  bool same_content(int32_t block, const BlockHash& ns, uint64_t parent_serial,
                    std::span<const int32_t> tokens) const;
  // Indexes `block` under key (asserts key free and block not indexed; tokens.size() ==
  // block_size). Returns the block's new serial (>= 1).
  uint64_t insert(const BlockHash& key, int32_t block, const BlockHash& parent_key, const BlockHash& ns,
                  uint64_t parent_serial, std::span<const int32_t> tokens, TimePoint now);
  // Removes an indexed block; returns its commit time.
  TimePoint erase(int32_t block);

  // False for ids beyond the index's size (a manager with prefix caching off sizes it 0).
  bool contains(int32_t block) const { return size_t(block) < serial_.size() && serial_[size_t(block)] != 0; }
  size_t size() const { return map_.size(); }
  uint64_t serial(int32_t block) const { return serial_[size_t(block)]; }
  uint64_t parent_serial(int32_t block) const { return parent_serial_[size_t(block)]; }
  const BlockHash& key(int32_t block) const { return key_[size_t(block)]; }
  const BlockHash& parent_key(int32_t block) const { return parent_key_[size_t(block)]; }
  const BlockHash& ns(int32_t block) const { return ns_[size_t(block)]; }
  std::span<const int32_t> tokens(int32_t block) const {
    return {tokens_.data() + size_t(block) * size_t(block_size_), size_t(block_size_)};
  }
  const std::unordered_map<BlockHash, int32_t, BlockHashHasher>& map() const { return map_; }

 private:
  friend class KvCacheTestPeer;

  int block_size_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> map_;  // key -> block
  std::vector<uint64_t> serial_;         // [num_blocks], 0 = not indexed
  std::vector<uint64_t> parent_serial_;  // [num_blocks]
  std::vector<BlockHash> key_;           // [num_blocks]
  std::vector<BlockHash> parent_key_;    // [num_blocks]
  std::vector<BlockHash> ns_;            // [num_blocks]
  std::vector<TimePoint> committed_at_;  // [num_blocks]
  std::vector<int32_t> tokens_;          // [num_blocks * block_size]
  uint64_t next_serial_ = 1;
};

}  // namespace kvserve
