#include "kvcache/prefix_index.h"

#include <algorithm>

namespace kvserve {

PrefixIndex::PrefixIndex(int32_t num_blocks, int block_size)
    : block_size_(block_size),
      serial_(size_t(num_blocks), 0),
      parent_serial_(size_t(num_blocks), 0),
      key_(size_t(num_blocks)),
      parent_key_(size_t(num_blocks)),
      ns_(size_t(num_blocks)),
      committed_at_(size_t(num_blocks)),
      tokens_(size_t(num_blocks) * size_t(block_size), 0) {
  map_.reserve(size_t(num_blocks));
}

int32_t PrefixIndex::find(const BlockHash& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? kNoBlock : it->second;
}

bool PrefixIndex::same_content(int32_t block, const BlockHash& ns, uint64_t parent_serial,
                               std::span<const int32_t> tokens) const {
  if (!contains(block) || parent_serial_[size_t(block)] != parent_serial || !(ns_[size_t(block)] == ns)) return false;
  const std::span<const int32_t> mine = this->tokens(block);
  return tokens.size() == mine.size() && std::equal(tokens.begin(), tokens.end(), mine.begin());
}

uint64_t PrefixIndex::insert(const BlockHash& key, int32_t block, const BlockHash& parent_key, const BlockHash& ns,
                             uint64_t parent_serial, std::span<const int32_t> tokens, TimePoint now) {
  KVS_ASSERT(!contains(block), "block already indexed");
  KVS_ASSERT(tokens.size() == size_t(block_size_), "indexing a block that is not full");
  const bool added = map_.emplace(key, block).second;
  KVS_ASSERT(added, "prefix key already indexed");
  const size_t b = size_t(block);
  serial_[b] = next_serial_++;
  parent_serial_[b] = parent_serial;
  key_[b] = key;
  parent_key_[b] = parent_key;
  ns_[b] = ns;
  committed_at_[b] = now;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + std::ptrdiff_t(b * size_t(block_size_)));
  return serial_[b];
}

PrefixIndex::TimePoint PrefixIndex::erase(int32_t block) {
  KVS_ASSERT(contains(block), "erasing a block that is not indexed");
  const size_t b = size_t(block);
  map_.erase(key_[b]);
  serial_[b] = 0;
  parent_serial_[b] = 0;
  key_[b] = parent_key_[b] = ns_[b] = BlockHash{};
  return committed_at_[b];
}

}  // namespace kvserve
