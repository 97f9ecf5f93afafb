// Content hashes for the prefix cache: XXH3-128 (Debian's libxxhash).
//
// A full block's key chains its parent's key, so equal keys mean (up to a 128-bit collision)
// equal token prefixes, not only equal blocks:
//   key(block i) = XXH3-128( parent key [16 B] | namespace [16 B] | token ids [block_size x int32] )
// with parent key = {} for block 0. The namespace keeps caches of different models, KV types or
// tenants (cache_salt) apart. The index never trusts a key alone: a hit also compares the stored
// token ids, namespace and parent (see PrefixIndex), so a collision costs a miss, never wrong K/V.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "kvcache/block_pool.h"

namespace kvserve {

// XXH3-128 of raw bytes (e.g. a model fingerprint, a cache_salt). Never returns the empty
// hash {0, 0}, which means "no hash" in a Block.
BlockHash hash_bytes(const void* data, size_t size);

// The chained key of one full block (layout above). Never returns {0, 0}.
BlockHash hash_block(const BlockHash& parent, const BlockHash& ns, std::span<const int32_t> tokens);

// The block-key function a KvCacheManager uses; hash_block unless a test injects a colliding one.
using BlockHasher = std::function<BlockHash(const BlockHash& parent, const BlockHash& ns, std::span<const int32_t> tokens)>;

// For unordered containers keyed by BlockHash: the key is already uniformly mixed.
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return size_t(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull)); }
};

}  // namespace kvserve
