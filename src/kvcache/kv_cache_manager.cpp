#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kvserve {

namespace {
std::string seq_name(KvCacheManager::SeqId seq) { return "sequence " + std::to_string(seq); }
}  // namespace

KvCacheManager::KvCacheManager(int32_t num_blocks, int block_size) : pool_(num_blocks, block_size) {}

int64_t KvCacheManager::blocks_to_grow(int64_t cur_tokens, int64_t num_new_tokens) const {
  if (num_new_tokens > std::numeric_limits<int64_t>::max() - cur_tokens) return -1;
  return num_blocks_for(cur_tokens + num_new_tokens, block_size()) - num_blocks_for(cur_tokens, block_size());
}

bool KvCacheManager::can_allocate(int64_t num_tokens) const {
  return num_tokens >= 0 && num_blocks_for(num_tokens, block_size()) <= num_blocks_free();
}

Status KvCacheManager::allocate(SeqId seq, int64_t num_tokens) {
  if (has_seq(seq)) return invalid_argument(seq_name(seq) + " already holds KV blocks");
  if (num_tokens < 0) return invalid_argument("cannot allocate " + std::to_string(num_tokens) + " tokens");
  int64_t need = num_blocks_for(num_tokens, block_size());
  if (need > num_blocks_free())
    return out_of_memory(seq_name(seq) + " needs " + std::to_string(need) + " KV blocks, " +
                         std::to_string(num_blocks_free()) + " free");
  // Reserve the table before touching the pool, so the only throwing step comes first.
  SeqState st;
  st.table.reserve_more(int32_t(need));
  auto it = seqs_.emplace(seq, std::move(st)).first;
  grow(it->second, num_tokens);
  return Status::ok_status();
}

bool KvCacheManager::can_append(SeqId seq, int64_t num_new_tokens) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || num_new_tokens < 0) return false;
  int64_t need = blocks_to_grow(it->second.num_tokens, num_new_tokens);
  return need >= 0 && need <= num_blocks_free();
}

Status KvCacheManager::append_slots(SeqId seq, int64_t num_new_tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  if (num_new_tokens < 0)
    return invalid_argument("cannot append " + std::to_string(num_new_tokens) + " tokens");
  SeqState& st = it->second;
  int64_t need = blocks_to_grow(st.num_tokens, num_new_tokens);
  if (need < 0) return invalid_argument(seq_name(seq) + ": token count overflows");
  if (need > num_blocks_free())
    return out_of_memory(seq_name(seq) + " needs " + std::to_string(need) + " more KV blocks, " +
                         std::to_string(num_blocks_free()) + " free");
  st.table.reserve_more(int32_t(need));
  grow(st, st.num_tokens + num_new_tokens);
  return Status::ok_status();
}

void KvCacheManager::grow(SeqState& st, int64_t new_total) {
  const int bs = block_size();
  const int64_t first_touched = st.num_tokens / bs;  // the partly filled last block, or the first new one
  const int64_t new_num_blocks = num_blocks_for(new_total, bs);
  while (st.table.num_blocks() < new_num_blocks) st.table.push_back(pool_.allocate());
  for (int64_t i = first_touched; i < new_num_blocks; ++i)
    pool_.set_num_tokens(st.table[int32_t(i)], int32_t(std::min<int64_t>(bs, new_total - i * bs)));
  total_tokens_ += new_total - st.num_tokens;
  st.num_tokens = new_total;
}

Status KvCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  // Release the tail first: released blocks queue at the free-list tail and leave from its head,
  // so a sequence's later blocks are reused (evicted, once cached) before its prefix blocks,
  // which are the ones another request is likely to share.
  const std::vector<int32_t>& ids = it->second.table.ids();
  for (auto b = ids.rbegin(); b != ids.rend(); ++b) pool_.release(*b);
  total_tokens_ -= it->second.num_tokens;
  seqs_.erase(it);
  return Status::ok_status();
}

int64_t KvCacheManager::num_tokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  KVS_ASSERT(it != seqs_.end(), "num_tokens() of an unknown sequence");
  return it->second.num_tokens;
}

const std::vector<int32_t>& KvCacheManager::block_table(SeqId seq) const {
  auto it = seqs_.find(seq);
  KVS_ASSERT(it != seqs_.end(), "block_table() of an unknown sequence");
  return it->second.table.ids();
}

KvSlot KvCacheManager::slot(SeqId seq, int64_t pos) const {
  auto it = seqs_.find(seq);
  KVS_ASSERT(it != seqs_.end(), "slot() of an unknown sequence");
  KVS_ASSERT(pos >= 0 && pos < it->second.num_tokens, "slot() position out of range");
  return KvSlot{it->second.table[int32_t(pos / block_size())], int32_t(pos % block_size())};
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.num_blocks_total = num_blocks_total();
  s.num_blocks_used = num_blocks_used();
  s.num_blocks_free = num_blocks_free();
  s.num_seqs = int64_t(num_seqs());
  s.num_tokens = total_tokens_;
  s.block_size = block_size();
  return s;
}

Status KvCacheManager::verify() const {
  KVS_RETURN_IF_ERROR(pool_.verify());
  auto fail = [](const std::string& what) { return internal_error("kv cache: " + what); };
  const int32_t n = num_blocks_total();
  const int bs = block_size();
  std::vector<int64_t> refs(size_t(n), 0);     // [num_blocks] table entries naming each block
  std::vector<int64_t> holder(size_t(n), -1);  // [num_blocks] last sequence index that named it
  int64_t seq_index = 0, tokens = 0;
  for (const auto& [seq, st] : seqs_) {
    if (st.num_tokens < 0) return fail(seq_name(seq) + " has negative num_tokens");
    const int64_t expected_blocks = num_blocks_for(st.num_tokens, bs);
    if (st.table.num_blocks() != expected_blocks)
      return fail(seq_name(seq) + " holds " + std::to_string(st.num_tokens) + " tokens in " +
                  std::to_string(st.table.num_blocks()) + " blocks, expected " +
                  std::to_string(expected_blocks));
    for (int32_t i = 0; i < st.table.num_blocks(); ++i) {
      const int32_t b = st.table.ids()[size_t(i)];
      auto where = [&, i] { return seq_name(seq) + " logical block " + std::to_string(i); };
      if (b < 0 || b >= n) return fail(where() + " names out-of-range block " + std::to_string(b));
      if (holder[size_t(b)] == seq_index) return fail(where() + " repeats block " + std::to_string(b));
      holder[size_t(b)] = seq_index;
      ++refs[size_t(b)];
      const int64_t fill = std::min<int64_t>(bs, st.num_tokens - int64_t(i) * bs);
      if (pool_.block(b).num_tokens != fill)
        return fail(where() + " (block " + std::to_string(b) + ") holds " +
                    std::to_string(pool_.block(b).num_tokens) + " tokens, expected " + std::to_string(fill));
    }
    tokens += st.num_tokens;
    ++seq_index;
  }
  for (int32_t b = 0; b < n; ++b)
    if (refs[size_t(b)] != pool_.block(b).ref_count)
      return fail("block " + std::to_string(b) + " has ref_count " +
                  std::to_string(pool_.block(b).ref_count) + " but " + std::to_string(refs[size_t(b)]) +
                  " table entries");
  if (tokens != total_tokens_)
    return fail("token total is " + std::to_string(total_tokens_) + ", sequences hold " +
                std::to_string(tokens));
  return Status::ok_status();
}

}  // namespace kvserve
