#include "kvcache/block_pool.h"

#include <string>

namespace kvserve {

BlockPool::BlockPool(int32_t num_blocks, int block_size) : block_size_(block_size) {
  KVS_ASSERT(num_blocks >= 0, "num_blocks must be >= 0");
  KVS_ASSERT(block_size >= 1, "block_size must be >= 1");
  blocks_.resize(size_t(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) {
    blocks_[size_t(i)].id = i;
    link_plain(i);
  }
}

const Block& BlockPool::block(int32_t id) const {
  KVS_ASSERT(id >= 0 && id < num_blocks_total(), "block id out of range");
  return blocks_[size_t(id)];
}

Block& BlockPool::mut(int32_t id) {
  KVS_ASSERT(id >= 0 && id < num_blocks_total(), "block id out of range");
  return blocks_[size_t(id)];
}

void BlockPool::link_tail(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(!b.in_free_list, "block already in the free list");
  KVS_ASSERT(!b.hash.empty(), "only hashed blocks join the cached segment");
  b.prev = tail_;
  b.next = kNoBlock;
  if (tail_ != kNoBlock)
    mut(tail_).next = id;
  else
    head_ = id;
  tail_ = id;
  b.in_free_list = true;
  ++num_free_;
  ++num_cached_;
}

void BlockPool::link_plain(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(!b.in_free_list, "block already in the free list");
  KVS_ASSERT(b.hash.empty(), "only unhashed blocks join the plain segment");
  b.prev = plain_tail_;
  b.next = plain_tail_ != kNoBlock ? mut(plain_tail_).next : head_;
  if (b.prev != kNoBlock)
    mut(b.prev).next = id;
  else
    head_ = id;
  if (b.next != kNoBlock)
    mut(b.next).prev = id;
  else
    tail_ = id;
  plain_tail_ = id;
  b.in_free_list = true;
  ++num_free_;
}

void BlockPool::link_released(int32_t id) {
  Block& b = mut(id);
  if (!b.hash.empty()) {
    link_tail(id);
  } else {
    b.num_tokens = 0;
    link_plain(id);
  }
}

void BlockPool::unlink(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(b.in_free_list, "block not in the free list");
  // The plain segment is a prefix of the list, so the plain tail's predecessor is plain too.
  if (id == plain_tail_) plain_tail_ = b.prev;
  if (b.prev != kNoBlock)
    mut(b.prev).next = b.next;
  else
    head_ = b.next;
  if (b.next != kNoBlock)
    mut(b.next).prev = b.prev;
  else
    tail_ = b.prev;
  b.prev = b.next = kNoBlock;
  b.in_free_list = false;
  --num_free_;
  if (!b.hash.empty()) --num_cached_;
}

int32_t BlockPool::allocate() {
  KVS_ASSERT(head_ != kNoBlock, "allocate() on an exhausted block pool");
  int32_t id = head_;
  KVS_ASSERT(mut(id).hash.empty(), "allocate() would take a cached block: evict it first");
  unlink(id);
  Block& b = mut(id);
  b.ref_count = 1;
  b.num_tokens = 0;
  return id;
}

void BlockPool::ref(int32_t id) {
  Block& b = mut(id);
  if (b.in_free_list) unlink(id);
  ++b.ref_count;
}

void BlockPool::release(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(b.ref_count > 0, "release() of an unreferenced block");
  if (--b.ref_count == 0 && b.pin_count == 0) link_released(id);
}

void BlockPool::set_num_tokens(int32_t id, int32_t num_tokens) {
  KVS_ASSERT(num_tokens >= 0 && num_tokens <= block_size_, "block num_tokens out of range");
  mut(id).num_tokens = num_tokens;
}

void BlockPool::set_hash(int32_t id, const BlockHash& hash) {
  Block& b = mut(id);
  KVS_ASSERT(b.ref_count > 0, "set_hash() of an unreferenced block");
  KVS_ASSERT(b.hash.empty(), "set_hash() of a block already hashed");
  KVS_ASSERT(!hash.empty(), "set_hash() with the empty hash");
  KVS_ASSERT(b.num_tokens == block_size_, "set_hash() of a block that is not full");
  b.hash = hash;
}

void BlockPool::drop_hash(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(!b.hash.empty(), "drop_hash() of an unhashed block");
  KVS_ASSERT(b.pin_count == 0, "drop_hash() of a pinned block");
  const bool was_free = b.in_free_list;
  if (was_free) unlink(id);
  b.hash = BlockHash{};
  if (was_free) link_released(id);
}

void BlockPool::pin(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(!b.hash.empty(), "pin() of an unhashed block");
  if (b.in_free_list) unlink(id);
  if (b.pin_count++ == 0) ++num_pinned_;
}

void BlockPool::unpin(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(b.pin_count > 0, "unpin() of an unpinned block");
  if (--b.pin_count == 0) {
    --num_pinned_;
    if (b.ref_count == 0) link_released(id);
  }
}

Status BlockPool::verify() const {
  auto fail = [](const std::string& what) { return internal_error("block pool: " + what); };
  const int32_t n = num_blocks_total();
  int32_t num_listable = 0, num_pinned = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Block& b = blocks_[size_t(i)];
    // Messages are built only on failure: verify() runs after every step in tests.
    auto name = [i] { return "block " + std::to_string(i); };
    if (b.id != i) return fail(name() + " has id " + std::to_string(b.id));
    if (b.ref_count < 0) return fail(name() + " has negative ref_count " + std::to_string(b.ref_count));
    if (b.pin_count < 0) return fail(name() + " has negative pin_count " + std::to_string(b.pin_count));
    if (b.num_tokens < 0 || b.num_tokens > block_size_)
      return fail(name() + " has num_tokens " + std::to_string(b.num_tokens) + " outside [0, block_size]");
    const bool listable = b.ref_count == 0 && b.pin_count == 0;
    if (listable != b.in_free_list)
      return fail(name() + " has ref_count " + std::to_string(b.ref_count) +
                  (b.pin_count != 0 ? " and pin_count " + std::to_string(b.pin_count) : std::string()) +
                  (b.in_free_list ? " but is in the free list" : " but is not in the free list"));
    if (b.in_free_list && b.hash.empty() && b.num_tokens != 0)
      return fail("free " + name() + " without a hash holds " + std::to_string(b.num_tokens) + " tokens");
    if (!b.hash.empty() && b.num_tokens != block_size_)
      return fail("hashed " + name() + " holds " + std::to_string(b.num_tokens) + " tokens, not a full block");
    if (b.pin_count > 0 && b.hash.empty()) return fail("pinned " + name() + " has no hash");
    if (!b.in_free_list && (b.prev != kNoBlock || b.next != kNoBlock))
      return fail("used " + name() + " still has free-list links");
    if (listable) ++num_listable;
    if (b.pin_count > 0) ++num_pinned;
  }
  // Walk the list; at most n steps, so a cycle shows up as a revisit.
  std::vector<char> seen(size_t(n), 0);
  int32_t count = 0, cached = 0, prev = kNoBlock, last_plain = kNoBlock;
  for (int32_t id = head_; id != kNoBlock; id = blocks_[size_t(id)].next) {
    if (id < 0 || id >= n) return fail("free list links to out-of-range id " + std::to_string(id));
    if (seen[size_t(id)]) return fail("block " + std::to_string(id) + " appears twice in the free list");
    seen[size_t(id)] = 1;
    const Block& b = blocks_[size_t(id)];
    if (!b.in_free_list) return fail("block " + std::to_string(id) + " is linked but not marked free");
    if (b.prev != prev) return fail("block " + std::to_string(id) + " has a wrong prev link");
    if (b.hash.empty()) {
      if (cached > 0)
        return fail("plain block " + std::to_string(id) + " follows a cached block in the free list");
      last_plain = id;
    } else {
      ++cached;
    }
    prev = id;
    ++count;
  }
  if (prev != tail_)
    return fail("free list tail is " + std::to_string(tail_) + ", last linked block is " +
                std::to_string(prev));
  if (last_plain != plain_tail_)
    return fail("plain segment tail is " + std::to_string(plain_tail_) + ", last plain block is " +
                std::to_string(last_plain));
  if (count != num_listable)
    return fail(std::to_string(num_listable) + " blocks have ref_count 0 but the free list links " +
                std::to_string(count));
  if (count != num_free_)
    return fail("free counter is " + std::to_string(num_free_) + " but the free list links " +
                std::to_string(count));
  if (cached != num_cached_)
    return fail("cached counter is " + std::to_string(num_cached_) + " but the free list links " +
                std::to_string(cached) + " hashed blocks");
  if (num_pinned != num_pinned_)
    return fail("pinned counter is " + std::to_string(num_pinned_) + " but " + std::to_string(num_pinned) +
                " blocks are pinned");
  return Status::ok_status();
}

}  // namespace kvserve
