#include "kvcache/prefix_hash.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

namespace kvserve {

namespace {
BlockHash from_xxh(XXH128_hash_t h) {
  BlockHash out{h.high64, h.low64};
  if (out.empty()) out.lo = 1;  // {0, 0} is reserved for "no hash"; 2^-128 odds, but keep it exact
  return out;
}
}  // namespace

BlockHash hash_bytes(const void* data, size_t size) { return from_xxh(XXH3_128bits(data, size)); }

BlockHash hash_block(const BlockHash& parent, const BlockHash& ns, std::span<const int32_t> tokens) {
  // One contiguous buffer [parent.hi, parent.lo, ns.hi, ns.lo | tokens] so that the key is a plain
  // function of bytes (no streaming state); thread_local avoids an allocation per block.
  thread_local std::vector<unsigned char> buf;
  const size_t head = 4 * sizeof(uint64_t);
  buf.resize(head + tokens.size_bytes());
  const uint64_t words[4] = {parent.hi, parent.lo, ns.hi, ns.lo};
  std::memcpy(buf.data(), words, head);
  if (!tokens.empty()) std::memcpy(buf.data() + head, tokens.data(), tokens.size_bytes());
  return from_xxh(XXH3_128bits(buf.data(), buf.size()));
}

}  // namespace kvserve
