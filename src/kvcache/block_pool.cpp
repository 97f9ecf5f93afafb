#include "kvcache/block_pool.h"

#include <string>

namespace kvserve {

BlockPool::BlockPool(int32_t num_blocks, int block_size) : block_size_(block_size) {
  KVS_ASSERT(num_blocks >= 0, "num_blocks must be >= 0");
  KVS_ASSERT(block_size >= 1, "block_size must be >= 1");
  blocks_.resize(size_t(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) {
    blocks_[size_t(i)].id = i;
    link_tail(i);
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
  b.prev = tail_;
  b.next = kNoBlock;
  if (tail_ != kNoBlock)
    mut(tail_).next = id;
  else
    head_ = id;
  tail_ = id;
  b.in_free_list = true;
  ++num_free_;
}

void BlockPool::unlink(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(b.in_free_list, "block not in the free list");
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
}

int32_t BlockPool::allocate() {
  KVS_ASSERT(head_ != kNoBlock, "allocate() on an exhausted block pool");
  int32_t id = head_;
  unlink(id);
  Block& b = mut(id);
  b.ref_count = 1;
  b.num_tokens = 0;
  b.hash = BlockHash{};
  return id;
}

void BlockPool::ref(int32_t id) {
  Block& b = mut(id);
  if (b.ref_count == 0) unlink(id);
  ++b.ref_count;
}

void BlockPool::release(int32_t id) {
  Block& b = mut(id);
  KVS_ASSERT(b.ref_count > 0, "release() of an unreferenced block");
  if (--b.ref_count == 0) {
    if (b.hash.empty()) b.num_tokens = 0;
    link_tail(id);
  }
}

void BlockPool::set_num_tokens(int32_t id, int32_t num_tokens) {
  KVS_ASSERT(num_tokens >= 0 && num_tokens <= block_size_, "block num_tokens out of range");
  mut(id).num_tokens = num_tokens;
}

Status BlockPool::verify() const {
  auto fail = [](const std::string& what) { return internal_error("block pool: " + what); };
  const int32_t n = num_blocks_total();
  int32_t num_ref_zero = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Block& b = blocks_[size_t(i)];
    // Messages are built only on failure: verify() runs after every step in tests.
    auto name = [i] { return "block " + std::to_string(i); };
    if (b.id != i) return fail(name() + " has id " + std::to_string(b.id));
    if (b.ref_count < 0) return fail(name() + " has negative ref_count " + std::to_string(b.ref_count));
    if (b.num_tokens < 0 || b.num_tokens > block_size_)
      return fail(name() + " has num_tokens " + std::to_string(b.num_tokens) + " outside [0, block_size]");
    if ((b.ref_count == 0) != b.in_free_list)
      return fail(name() + " has ref_count " + std::to_string(b.ref_count) +
                  (b.in_free_list ? " but is in the free list" : " but is not in the free list"));
    if (b.in_free_list && b.hash.empty() && b.num_tokens != 0)
      return fail("free " + name() + " without a hash holds " + std::to_string(b.num_tokens) + " tokens");
    if (!b.in_free_list && (b.prev != kNoBlock || b.next != kNoBlock))
      return fail("used " + name() + " still has free-list links");
    if (b.ref_count == 0) ++num_ref_zero;
  }
  // Walk the list; at most n steps, so a cycle shows up as a revisit.
  std::vector<char> seen(size_t(n), 0);
  int32_t count = 0, prev = kNoBlock;
  for (int32_t id = head_; id != kNoBlock; id = blocks_[size_t(id)].next) {
    if (id < 0 || id >= n) return fail("free list links to out-of-range id " + std::to_string(id));
    if (seen[size_t(id)]) return fail("block " + std::to_string(id) + " appears twice in the free list");
    seen[size_t(id)] = 1;
    const Block& b = blocks_[size_t(id)];
    if (!b.in_free_list) return fail("block " + std::to_string(id) + " is linked but not marked free");
    if (b.prev != prev) return fail("block " + std::to_string(id) + " has a wrong prev link");
    prev = id;
    ++count;
  }
  if (prev != tail_)
    return fail("free list tail is " + std::to_string(tail_) + ", last linked block is " +
                std::to_string(prev));
  if (count != num_ref_zero)
    return fail(std::to_string(num_ref_zero) + " blocks have ref_count 0 but the free list links " +
                std::to_string(count));
  if (count != num_free_)
    return fail("free counter is " + std::to_string(num_free_) + " but the free list links " +
                std::to_string(count));
  return Status::ok_status();
}

}  // namespace kvserve
