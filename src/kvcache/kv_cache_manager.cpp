#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace kvserve {

namespace {
std::string seq_name(KvCacheManager::SeqId seq) { return "sequence " + std::to_string(seq); }
std::string hash_name(const BlockHash& h) { return std::to_string(h.hi) + ":" + std::to_string(h.lo); }
}  // namespace

KvCacheManager::KvCacheManager(int32_t num_blocks, int block_size, PrefixCacheOptions options)
    : options_(std::move(options)),
      pool_(num_blocks, block_size),
      // Off, the index is never used: no per-block copies of token ids.
      index_(options_.enable_prefix_cache ? num_blocks : 0, block_size) {
  KVS_ASSERT(options_.max_pinned_fraction >= 0.0 && options_.max_pinned_fraction <= 1.0,
             "max_pinned_fraction must be in [0, 1]");
  KVS_ASSERT(options_.min_unpinned_blocks >= 0, "min_unpinned_blocks must be >= 0");
  if (options_.enable_prefix_cache) recent_.reserve(kPrefixStatsWindow);
}

std::chrono::steady_clock::time_point KvCacheManager::now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

int32_t KvCacheManager::pinned_cap() const {
  const int32_t by_fraction = int32_t(std::floor(options_.max_pinned_fraction * double(num_blocks_total())));
  return std::max(0, std::min(by_fraction, num_blocks_total() - options_.min_unpinned_blocks));
}

void KvCacheManager::emit(CacheEventKind kind, int64_t seq, std::vector<int32_t> blocks) const {
  if (!listener_ || blocks.empty()) return;
  CacheEvent e;
  e.kind = kind;
  e.seq = seq;
  e.blocks = std::move(blocks);
  listener_(e);
}

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
  grow(seq, it->second, num_tokens);
  return Status::ok_status();
}

// ---- prefix cache ----

BlockHash KvCacheManager::block_key(const BlockHash& parent, const BlockHash& ns,
                                    std::span<const int32_t> block_tokens) const {
  return options_.hasher ? options_.hasher(parent, ns, block_tokens) : hash_block(parent, ns, block_tokens);
}

PrefixMatch KvCacheManager::match_prefix(const BlockHash& ns, std::span<const int32_t> tokens,
                                         int64_t max_tokens) const {
  PrefixMatch m;
  m.ns = ns;
  m.query_tokens = int64_t(tokens.size());
  if (!prefix_cache_enabled() || index_.size() == 0) return m;
  const int64_t bs = block_size();
  const int64_t limit = std::clamp<int64_t>(max_tokens, 0, int64_t(tokens.size()));
  BlockHash parent;
  uint64_t parent_serial = 0;  // the root
  for (int64_t i = 0; i < limit / bs; ++i) {
    const std::span<const int32_t> blk = tokens.subspan(size_t(i * bs), size_t(bs));
    const BlockHash key = block_key(parent, ns, blk);
    const int32_t b = index_.find(key);
    // The key only proposes a block; namespace, parent entry and tokens decide (prefix_index.h).
    if (b == kNoBlock || !index_.same_content(b, ns, parent_serial, blk)) break;
    m.blocks.push_back(b);
    m.keys.push_back(key);
    m.serials.push_back(index_.serial(b));
    if (pool_.block(b).in_free_list) ++m.num_evictable;
    parent = key;
    parent_serial = index_.serial(b);
  }
  m.num_tokens = int64_t(m.blocks.size()) * bs;
  return m;
}

bool KvCacheManager::match_is_current(const PrefixMatch& m, int32_t* evictable) const {
  *evictable = 0;
  if (m.keys.size() != m.blocks.size() || m.serials.size() != m.blocks.size()) return false;
  if (m.num_tokens != int64_t(m.blocks.size()) * block_size()) return false;
  if (!m.blocks.empty() && !prefix_cache_enabled()) return false;
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    const int32_t b = m.blocks[i];
    // Serials are never reused, so an equal serial is the very entry that was matched.
    if (b < 0 || b >= num_blocks_total() || index_.serial(b) != m.serials[i] || m.serials[i] == 0) return false;
    if (pool_.block(b).in_free_list) ++*evictable;
  }
  return true;
}

bool KvCacheManager::can_allocate(const PrefixMatch& match, int64_t num_tokens) const {
  int32_t evictable = 0;
  if (num_tokens < match.num_tokens || !match_is_current(match, &evictable)) return false;
  const int64_t need = num_blocks_for(num_tokens, block_size()) - match.num_blocks();
  return need <= int64_t(num_blocks_free()) - evictable;
}

Status KvCacheManager::allocate(SeqId seq, int64_t num_tokens, const PrefixMatch& match) {
  if (has_seq(seq)) return invalid_argument(seq_name(seq) + " already holds KV blocks");
  if (num_tokens < match.num_tokens)
    return invalid_argument("cannot allocate " + std::to_string(num_tokens) + " tokens over a cached prefix of " +
                            std::to_string(match.num_tokens));
  int32_t evictable = 0;
  if (!match_is_current(match, &evictable))
    return invalid_argument(seq_name(seq) + ": the prefix match is stale (the cache changed since)");
  const int32_t k = match.num_blocks();
  const int64_t need = num_blocks_for(num_tokens, block_size()) - k;
  if (need > int64_t(num_blocks_free()) - evictable)
    return out_of_memory(seq_name(seq) + " needs " + std::to_string(need) + " KV blocks beside its " +
                         std::to_string(k) + " cached ones, " + std::to_string(num_blocks_free() - evictable) +
                         " free");
  SeqState st;
  st.ns = match.ns;
  st.table.reserve_more(int32_t(k + need));
  st.chain_keys = match.keys;
  st.chain_serials = match.serials;
  auto it = seqs_.emplace(seq, std::move(st)).first;
  SeqState& s = it->second;
  // Take the shared blocks first: ref() unlinks them from the free list, so growing below can
  // only evict other cached blocks.
  for (int32_t b : match.blocks) {
    pool_.ref(b);
    s.table.push_back(b);
  }
  s.num_tokens = match.num_tokens;
  total_tokens_ += match.num_tokens;
  if (listener_) emit(CacheEventKind::kReused, seq, match.blocks);
  grow(seq, s, num_tokens);
  // An empty lookup (e.g. re-creating a table) is not a query.
  if (prefix_cache_enabled() && match.query_tokens > 0) record_query(match.query_tokens, match.num_tokens);
  return Status::ok_status();
}

Status KvCacheManager::commit(SeqId seq, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  SeqState& st = it->second;
  if (!prefix_cache_enabled() || st.chain_broken) return Status::ok_status();
  const int64_t bs = block_size();
  const int64_t full = std::min<int64_t>(int64_t(tokens.size()), st.num_tokens) / bs;
  if (int64_t(st.chain_keys.size()) >= full) return Status::ok_status();
  st.chain_keys.reserve(size_t(full));
  st.chain_serials.reserve(size_t(full));
  std::vector<int32_t> committed;
  for (int64_t i = int64_t(st.chain_keys.size()); i < full; ++i) {
    const std::span<const int32_t> blk = tokens.subspan(size_t(i * bs), size_t(bs));
    const BlockHash parent = i > 0 ? st.chain_keys[size_t(i - 1)] : BlockHash{};
    const uint64_t parent_serial = i > 0 ? st.chain_serials[size_t(i - 1)] : 0;
    const BlockHash key = block_key(parent, st.ns, blk);
    const int32_t b = st.table[int32_t(i)];
    if (b == kNoBlock) {
      st.chain_broken = true;  // released before it was committed: its content is gone
      break;
    }
    KVS_ASSERT(pool_.block(b).hash.empty(), "a block past the committed chain carries a hash");
    const int32_t twin = index_.find(key);
    uint64_t serial = 0;
    if (twin == kNoBlock) {
      serial = index_.insert(key, b, parent, st.ns, parent_serial, blk, now());
      pool_.set_hash(b, key);
      committed.push_back(b);
    } else if (index_.same_content(twin, st.ns, parent_serial, blk)) {
      serial = index_.serial(twin);  // computed twice (no shared admission); the indexed one serves
    } else {
      st.chain_broken = true;  // a real key collision: never index anything chained from it
      break;
    }
    st.chain_keys.push_back(key);
    st.chain_serials.push_back(serial);
  }
  if (listener_) emit(CacheEventKind::kCommitted, seq, std::move(committed));
  return Status::ok_status();
}

int32_t KvCacheManager::num_committed_blocks(SeqId seq) const {
  auto it = seqs_.find(seq);
  KVS_ASSERT(it != seqs_.end(), "num_committed_blocks() of an unknown sequence");
  return int32_t(it->second.chain_keys.size());
}

Status KvCacheManager::check_tokens(SeqId seq, std::span<const int32_t> tokens) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  const int64_t bs = block_size();
  const std::vector<int32_t>& ids = it->second.table.ids();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == kNoBlock || pool_.block(ids[i]).hash.empty()) continue;
    const std::string where = seq_name(seq) + " logical block " + std::to_string(i);
    if (int64_t(tokens.size()) < int64_t(i + 1) * bs)
      return internal_error("kv cache: " + where + " is indexed but the sequence has no such full block");
    const std::span<const int32_t> cached = index_.tokens(ids[i]);
    if (!std::equal(cached.begin(), cached.end(), tokens.begin() + std::ptrdiff_t(i * size_t(bs))))
      return internal_error("kv cache: " + where + " (block " + std::to_string(ids[i]) +
                            ") is indexed with other tokens than the sequence's");
  }
  return Status::ok_status();
}

void KvCacheManager::record_query(int64_t query_tokens, int64_t hit_tokens) {
  ++queries_total_;
  query_tokens_total_ += query_tokens;
  hit_tokens_total_ += hit_tokens;
  if (recent_.size() < size_t(kPrefixStatsWindow)) {
    recent_.emplace_back(query_tokens, hit_tokens);
  } else {
    recent_query_tokens_ -= recent_[recent_next_].first;
    recent_hit_tokens_ -= recent_[recent_next_].second;
    recent_[recent_next_] = {query_tokens, hit_tokens};
  }
  recent_next_ = (recent_next_ + 1) % size_t(kPrefixStatsWindow);
  recent_query_tokens_ += query_tokens;
  recent_hit_tokens_ += hit_tokens;
}

Expected<int64_t> KvCacheManager::pin_prefix(const BlockHash& ns, std::span<const int32_t> tokens) {
  if (!prefix_cache_enabled()) return unsupported("prefix caching is off");
  const PrefixMatch m = match_prefix(ns, tokens, int64_t(tokens.size()));
  int32_t newly = 0;
  for (int32_t b : m.blocks) newly += pool_.block(b).pin_count == 0 ? 1 : 0;
  if (pool_.num_blocks_pinned() + newly > pinned_cap())
    return out_of_memory("pinning " + std::to_string(newly) + " more KV blocks would exceed the cap of " +
                         std::to_string(pinned_cap()) + " pinned blocks (" +
                         std::to_string(pool_.num_blocks_pinned()) + " pinned)");
  for (int32_t b : m.blocks) pool_.pin(b);
  if (listener_) emit(CacheEventKind::kPinned, -1, m.blocks);
  return m.num_tokens;
}

Expected<int64_t> KvCacheManager::unpin_prefix(const BlockHash& ns, std::span<const int32_t> tokens) {
  if (!prefix_cache_enabled()) return unsupported("prefix caching is off");
  const PrefixMatch m = match_prefix(ns, tokens, int64_t(tokens.size()));
  std::vector<int32_t> unpinned;
  for (auto b = m.blocks.rbegin(); b != m.blocks.rend(); ++b) {
    if (pool_.block(*b).pin_count == 0) continue;
    pool_.unpin(*b);
    unpinned.push_back(*b);
  }
  const int64_t n = int64_t(unpinned.size()) * block_size();
  if (listener_) emit(CacheEventKind::kUnpinned, -1, std::move(unpinned));
  return n;
}

int32_t KvCacheManager::unpin_all() {
  std::vector<int32_t> unpinned;
  for (int32_t b = 0; b < num_blocks_total(); ++b) {
    if (pool_.block(b).pin_count == 0) continue;
    while (pool_.block(b).pin_count > 0) pool_.unpin(b);
    unpinned.push_back(b);
  }
  const int32_t n = int32_t(unpinned.size());
  if (listener_) emit(CacheEventKind::kUnpinned, -1, std::move(unpinned));
  return n;
}

int32_t KvCacheManager::flush() {
  std::vector<int32_t> dropped;
  for (int32_t b = pool_.lru_head(); b != kNoBlock; b = pool_.free_next(b)) dropped.push_back(b);
  for (int32_t b : dropped) {
    (void)index_.erase(b);
    pool_.drop_hash(b);
  }
  const int32_t n = int32_t(dropped.size());
  if (listener_) emit(CacheEventKind::kFlushed, -1, std::move(dropped));
  return n;
}

void KvCacheManager::evict_lru() {
  const int32_t victim = pool_.lru_head();
  KVS_ASSERT(victim != kNoBlock, "evict_lru() without a cached block");
  const auto committed_at = index_.erase(victim);
  pool_.drop_hash(victim);
  ++evictions_total_;
  if (evicted_lifetimes_.size() >= kMaxPendingLifetimes)
    evicted_lifetimes_.erase(evicted_lifetimes_.begin(),
                             evicted_lifetimes_.begin() + std::ptrdiff_t(kMaxPendingLifetimes / 2));
  evicted_lifetimes_.push_back(std::chrono::duration<double>(now() - committed_at).count());
  if (listener_) emit(CacheEventKind::kEvicted, -1, {victim});
}

std::vector<double> KvCacheManager::take_evicted_lifetimes() {
  std::vector<double> out;
  out.swap(evicted_lifetimes_);
  return out;
}

PrefixCacheStats KvCacheManager::prefix_stats() const {
  PrefixCacheStats s;
  s.enabled = prefix_cache_enabled();
  s.blocks_total = num_blocks_total();
  s.blocks_pinned = pool_.num_blocks_pinned();
  s.blocks_used = pool_.num_blocks_used() - s.blocks_pinned;  // pinned blocks are never in the free list
  s.blocks_cached = pool_.num_blocks_cached();
  s.blocks_free = pool_.num_blocks_plain_free();
  s.evictions_total = evictions_total_;
  s.queries_total = queries_total_;
  s.query_tokens_total = query_tokens_total_;
  s.hit_tokens_total = hit_tokens_total_;
  s.recent_queries = int32_t(recent_.size());
  s.recent_query_tokens = recent_query_tokens_;
  s.recent_hit_tokens = recent_hit_tokens_;
  s.pinned_blocks_cap = pinned_cap();
  return s;
}

// ---- growth and release ----

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
  grow(seq, st, st.num_tokens + num_new_tokens);
  return Status::ok_status();
}

int32_t KvCacheManager::take_block() {
  // Never-hashed blocks first; only when none is left does the LRU cached block go.
  if (pool_.num_blocks_plain_free() == 0) evict_lru();
  return pool_.allocate();
}

void KvCacheManager::grow(SeqId seq, SeqState& st, int64_t new_total) {
  const int bs = block_size();
  const int64_t first_touched = st.num_tokens / bs;  // the partly filled last block, or the first new one
  const int64_t new_num_blocks = num_blocks_for(new_total, bs);
  const int32_t first_new = st.table.num_blocks();
  while (st.table.num_blocks() < new_num_blocks) st.table.push_back(take_block());
  for (int64_t i = first_touched; i < new_num_blocks; ++i)
    pool_.set_num_tokens(st.table[int32_t(i)], int32_t(std::min<int64_t>(bs, new_total - i * bs)));
  total_tokens_ += new_total - st.num_tokens;
  st.num_tokens = new_total;
  if (listener_ && st.table.num_blocks() > first_new)
    emit(CacheEventKind::kAllocated, seq,
         std::vector<int32_t>(st.table.ids().begin() + first_new, st.table.ids().end()));
}

Status KvCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  // Release the tail first: cached blocks queue at the free-list tail and leave from the head of
  // the cached segment, so a sequence's later blocks are evicted before its prefix blocks,
  // which are the ones another request is likely to share.
  const std::vector<int32_t>& ids = it->second.table.ids();
  std::vector<int32_t> freed;
  for (auto b = ids.rbegin(); b != ids.rend(); ++b) {
    if (*b == kNoBlock) break;  // holes lead the table: everything before is released already
    pool_.release(*b);
    if (listener_) freed.push_back(*b);
  }
  if (listener_) emit(CacheEventKind::kFreed, seq, std::move(freed));
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
  const int32_t b = it->second.table[int32_t(pos / block_size())];
  KVS_ASSERT(b != kNoBlock, "slot() of a position released out of the attention window");
  return KvSlot{b, int32_t(pos % block_size())};
}

// ---- attention window and context shift ----

Expected<int32_t> KvCacheManager::release_before(SeqId seq, int64_t pos) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  SeqState& st = it->second;
  const int64_t upto = std::clamp<int64_t>(pos, 0, st.num_tokens) / block_size();  // blocks wholly before pos
  std::vector<int32_t> released;
  for (int64_t i = st.num_released; i < upto; ++i) {
    const int32_t b = st.table[int32_t(i)];
    st.table.set(int32_t(i), kNoBlock);
    pool_.release(b);
    released.push_back(b);
  }
  st.num_released = int32_t(std::max<int64_t>(st.num_released, upto));
  const int32_t n = int32_t(released.size());
  if (listener_) emit(CacheEventKind::kReleased, seq, std::move(released));
  return n;
}

int32_t KvCacheManager::num_released_blocks(SeqId seq) const {
  auto it = seqs_.find(seq);
  KVS_ASSERT(it != seqs_.end(), "num_released_blocks() of an unknown sequence");
  return it->second.num_released;
}

int32_t KvCacheManager::num_held_blocks(SeqId seq) const {
  auto it = seqs_.find(seq);
  KVS_ASSERT(it != seqs_.end(), "num_held_blocks() of an unknown sequence");
  return it->second.table.num_blocks() - it->second.num_released;
}

bool KvCacheManager::needs_copy(int32_t block) const {
  const Block& b = pool_.block(block);
  return b.ref_count > 1 || b.pin_count > 0;
}

void KvCacheManager::unindex_private(int32_t block) {
  if (pool_.block(block).hash.empty()) return;
  (void)index_.erase(block);
  pool_.drop_hash(block);
}

// Layout of a shift over the old table (bs = block size, kb = keep / bs, r = keep % bs,
// db = discard / bs): blocks [0, kb) stay as they are; when r > 0 the block at kb keeps its first
// r slots and receives slots [r, fill) of old block kb + db (the first moved tokens), and old
// blocks (kb, kb + db] are released; when r == 0 old blocks [kb, kb + db) are released. The
// blocks after that move down by db, unchanged except for the key re-rotation.
Expected<int32_t> KvCacheManager::shift_blocks_needed(SeqId seq, int64_t keep, int64_t discard) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return not_found(seq_name(seq) + " holds no KV blocks");
  const SeqState& st = it->second;
  const int64_t bs = block_size();
  if (keep < 0 || discard < bs || discard % bs != 0 || keep > st.num_tokens - discard)
    return invalid_argument("cannot shift " + seq_name(seq) + " of " + std::to_string(st.num_tokens) +
                            " tokens keeping " + std::to_string(keep) + " and discarding " +
                            std::to_string(discard) + " (a positive multiple of the block size " +
                            std::to_string(bs) + ")");
  if (st.num_released > 0)
    return invalid_argument("cannot shift " + seq_name(seq) + ": its attention window released blocks");
  const int64_t kb = keep / bs, r = keep % bs, db = discard / bs;
  const std::vector<int32_t>& old = st.table.ids();
  int32_t need = 0;
  if (r > 0 && needs_copy(old[size_t(kb)])) ++need;
  for (size_t j = size_t(kb + db + (r > 0 ? 1 : 0)); j < old.size(); ++j) need += needs_copy(old[j]) ? 1 : 0;
  return need;
}

Expected<KvShiftPlan> KvCacheManager::shift(SeqId seq, int64_t keep, int64_t discard) {
  KVS_ASSIGN_OR_RETURN(const int32_t need, shift_blocks_needed(seq, keep, discard));
  if (need > num_blocks_free())
    return out_of_memory("shifting " + seq_name(seq) + " needs " + std::to_string(need) +
                         " KV blocks for copies of shared blocks, " + std::to_string(num_blocks_free()) + " free");
  SeqState& st = seqs_.at(seq);
  const int64_t bs = block_size(), n_tok = st.num_tokens;
  const int64_t kb = keep / bs, r = keep % bs, db = discard / bs;
  const std::vector<int32_t> old = st.table.ids();
  KvShiftPlan plan;
  plan.keep = keep;
  plan.discard = discard;
  std::vector<int32_t> next(old.begin(), old.begin() + kb);  // the new table
  next.reserve(old.size() - size_t(db));
  // Every fresh block is taken before any block is released, so no copy's source can be handed
  // out again as a destination.
  std::vector<int32_t> released, fresh;
  std::vector<int32_t> rewritten;  // this sequence's own blocks whose content changes in place
  auto take = [&] {
    fresh.push_back(take_block());
    return fresh.back();
  };
  size_t first_moved = size_t(kb + db);
  if (r > 0) {
    const int32_t head = old[size_t(kb)], src = old[size_t(kb + db)];
    const int32_t fill = int32_t(std::min<int64_t>(bs, n_tok - (kb + db) * bs));  // >= r
    int32_t m = head;
    // A cached head (the start of every prompt sharing these tokens) is worth a spare block:
    // copy it rather than drop it from the index, when a block is free beyond the required ones.
    const bool keep_cached = !pool_.block(head).hash.empty() && num_blocks_free() > need;
    if (needs_copy(head) || keep_cached) {
      m = take();
      plan.copies.push_back({head, m, 0, 0, int32_t(r)});
      released.push_back(head);
    } else {
      rewritten.push_back(head);
    }
    if (fill > r) plan.copies.push_back({src, m, int32_t(r), int32_t(r), fill - int32_t(r)});
    pool_.set_num_tokens(m, fill);
    next.push_back(m);
    for (int64_t j = kb + 1; j <= kb + db; ++j) released.push_back(old[size_t(j)]);
    first_moved = size_t(kb + db + 1);
  } else {
    for (int64_t j = kb; j < kb + db; ++j) released.push_back(old[size_t(j)]);
  }
  for (size_t j = first_moved; j < old.size(); ++j) {
    const int32_t b = old[j];
    if (!needs_copy(b)) {
      rewritten.push_back(b);
      next.push_back(b);
      continue;
    }
    const int32_t c = take();
    const int32_t fill = pool_.block(b).num_tokens;
    plan.copies.push_back({b, c, 0, 0, fill});
    pool_.set_num_tokens(c, fill);
    released.push_back(b);
    next.push_back(c);
  }
  KVS_ASSERT(int32_t(fresh.size()) >= need && int32_t(fresh.size()) <= need + 1,
             "shift took another number of blocks than it predicted");
  // Its own committed blocks are about to hold other K/V: they leave the index (their cached
  // content is gone; nobody else holds them, or they would have been copied).
  for (int32_t b : rewritten) unindex_private(b);
  for (int32_t b : released) pool_.release(b);
  st.table.assign(std::move(next));
  st.num_tokens = n_tok - discard;
  total_tokens_ -= discard;
  // Blocks [0, kb) are untouched and still hold the sequence's first tokens; nothing after them
  // may ever be committed.
  if (int64_t(st.chain_keys.size()) > kb) {
    st.chain_keys.resize(size_t(kb));
    st.chain_serials.resize(size_t(kb));
  }
  st.chain_broken = true;
  if (listener_) {
    emit(CacheEventKind::kAllocated, seq, fresh);
    emit(CacheEventKind::kShifted, seq, released);
  }
  plan.rotate_begin = keep;
  plan.rotate_end = st.num_tokens;
  plan.delta = -discard;
  return plan;
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
    if (st.chain_keys.size() != st.chain_serials.size() || int64_t(st.chain_keys.size()) > st.num_tokens / bs)
      return fail(seq_name(seq) + " has a committed chain of " + std::to_string(st.chain_keys.size()) +
                  " blocks for " + std::to_string(st.num_tokens) + " tokens");
    if (!prefix_cache_enabled() && !st.chain_keys.empty())
      return fail(seq_name(seq) + " has a committed chain with prefix caching off");
    if (st.num_released < 0 || st.num_released > st.table.num_blocks())
      return fail(seq_name(seq) + " counts " + std::to_string(st.num_released) + " released blocks of " +
                  std::to_string(st.table.num_blocks()));
    for (int32_t i = 0; i < st.table.num_blocks(); ++i) {
      const int32_t b = st.table.ids()[size_t(i)];
      auto where = [&, i] { return seq_name(seq) + " logical block " + std::to_string(i); };
      if (i < st.num_released) {
        if (b != kNoBlock) return fail(where() + " is released but still names block " + std::to_string(b));
        continue;
      }
      if (b < 0 || b >= n) return fail(where() + " names out-of-range block " + std::to_string(b));
      if (holder[size_t(b)] == seq_index) return fail(where() + " repeats block " + std::to_string(b));
      holder[size_t(b)] = seq_index;
      ++refs[size_t(b)];
      const int64_t fill = std::min<int64_t>(bs, st.num_tokens - int64_t(i) * bs);
      if (pool_.block(b).num_tokens != fill)
        return fail(where() + " (block " + std::to_string(b) + ") holds " +
                    std::to_string(pool_.block(b).num_tokens) + " tokens, expected " + std::to_string(fill));
      const Block& blk = pool_.block(b);
      if (!blk.hash.empty()) {
        if (size_t(i) >= st.chain_keys.size())
          return fail(where() + " (block " + std::to_string(b) + ") is indexed beyond the committed chain");
        if (!(blk.hash == st.chain_keys[size_t(i)]) || index_.serial(b) != st.chain_serials[size_t(i)])
          return fail(where() + " (block " + std::to_string(b) + ") disagrees with the committed chain");
      }
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

  // The prefix index against the pool's hashes, both ways.
  int64_t hashed = 0;
  for (int32_t b = 0; b < n; ++b) {
    const Block& blk = pool_.block(b);
    if (blk.hash.empty()) {
      if (index_.contains(b)) return fail("block " + std::to_string(b) + " is indexed but carries no hash");
      continue;
    }
    ++hashed;
    if (!prefix_cache_enabled()) return fail("block " + std::to_string(b) + " is hashed with prefix caching off");
    if (index_.find(blk.hash) != b)
      return fail("hashed block " + std::to_string(b) + " is not indexed under its hash " + hash_name(blk.hash));
    if (!index_.contains(b) || !(index_.key(b) == blk.hash))
      return fail("index entry of block " + std::to_string(b) + " records another key");
    if (!(block_key(index_.parent_key(b), index_.ns(b), index_.tokens(b)) == blk.hash))
      return fail("index entry of block " + std::to_string(b) + " does not hash to its key (tokens changed?)");
    if (index_.serial(b) <= index_.parent_serial(b))
      return fail("index entry of block " + std::to_string(b) + " is older than its parent");
  }
  if (int64_t(index_.size()) != hashed)
    return fail("the index holds " + std::to_string(index_.size()) + " entries but " + std::to_string(hashed) +
                " blocks are hashed");
  for (const auto& [key, b] : index_.map())
    if (b < 0 || b >= n || !(pool_.block(b).hash == key))
      return fail("index key " + hash_name(key) + " names block " + std::to_string(b) + " which carries another hash");
  if (pool_.num_blocks_pinned() > pinned_cap())
    return fail(std::to_string(pool_.num_blocks_pinned()) + " blocks pinned, cap " + std::to_string(pinned_cap()));

  int64_t rq = 0, rh = 0;
  for (const auto& [q, h] : recent_) {
    rq += q;
    rh += h;
  }
  if (rq != recent_query_tokens_ || rh != recent_hit_tokens_ || recent_.size() > size_t(kPrefixStatsWindow))
    return fail("recent prefix-query sums disagree with their window");
  return Status::ok_status();
}

}  // namespace kvserve
