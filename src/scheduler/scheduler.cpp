#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

namespace kvserve {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& cache) : config_(config), cache_(cache) {
  KVS_ASSERT(config_.max_seqs >= 1, "max_seqs must be >= 1");
  KVS_ASSERT(config_.max_batched_tokens >= 1, "max_batched_tokens must be >= 1");
}

Status Scheduler::add(SeqId id, std::vector<int32_t> prompt, BlockHash ns, bool compute_whole_prompt) {
  if (seqs_.count(id) != 0) return invalid_argument("sequence " + std::to_string(id) + " already exists");
  if (prompt.empty()) return invalid_argument("sequence " + std::to_string(id) + " has an empty prompt");
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->arrival = next_arrival_++;
  s->num_prompt_tokens = int64_t(prompt.size());
  s->tokens = std::move(prompt);
  s->ns = ns;
  s->compute_whole_prompt = compute_whole_prompt;
  waiting_.push_back(s.get());
  seqs_.emplace(id, std::move(s));
  return Status::ok_status();
}

Sequence* Scheduler::get(SeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const Sequence* Scheduler::find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<SeqId> Scheduler::running_ids() const {
  std::vector<SeqId> ids;
  for (const Sequence* s : running_) ids.push_back(s->id);
  return ids;
}

std::vector<SeqId> Scheduler::waiting_ids() const {
  std::vector<SeqId> ids;
  for (const Sequence* s : waiting_) ids.push_back(s->id);
  return ids;
}

int64_t Scheduler::appendable_tokens(const Sequence& s) const {
  const int64_t bs = cache_.block_size();
  const int64_t cur = cache_.num_tokens(s.id);
  const int64_t in_last_block = cur % bs == 0 ? 0 : bs - cur % bs;
  return in_last_block + int64_t(cache_.num_blocks_free()) * bs;
}

void Scheduler::preempt(Sequence& s, ScheduleOutput& out, int64_t& budget) {
  // A victim may already hold a chunk of this step (a decode chunk scheduled before an older
  // sequence's prefill ran short): take the chunk back with its budget.
  auto& chunks = out.chunks;
  for (auto it = chunks.begin(); it != chunks.end();) {
    if (it->seq == s.id) {
      budget += it->num_tokens;
      out.num_batched_tokens -= it->num_tokens;
      it = chunks.erase(it);
    } else {
      ++it;
    }
  }
  // Blocks committed at the start of this step stay cached and may serve its re-admission;
  // this step's chunks were taken back above, so nothing unwritten was committed.
  drop_pending(s);
  Status st = cache_.free(s.id);
  KVS_ASSERT(st.ok(), "a running sequence holds KV blocks");
  s.num_computed = 0;
  s.num_executed = 0;
  s.status = SeqStatus::kWaiting;
  ++s.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  // It arrived before every waiting sequence (admission is FCFS), so the front keeps order.
  waiting_.push_front(&s);
  out.preempted.push_back(s.id);
}

int64_t Scheduler::chunk_limit(const Sequence& s, int64_t budget) const {
  return s.compute_whole_prompt ? std::min(budget, config_.max_all_logits_chunk) : budget;
}

bool Scheduler::schedule_running(Sequence& s, int64_t max_tokens, ScheduleOutput& out, int64_t& budget) {
  const int64_t want = std::min({max_tokens, s.num_uncomputed(), budget});
  if (want <= 0) return false;
  for (;;) {
    const int64_t n = std::min(want, appendable_tokens(s));
    if (n >= 1) {
      Status st = cache_.append_slots(s.id, n);
      KVS_ASSERT(st.ok(), "append_slots failed after the free-slot check");
      ScheduledChunk c;
      c.seq = s.id;
      c.start_pos = s.num_computed;
      c.num_tokens = int32_t(n);
      c.sample = s.num_computed + n == s.num_tokens();
      out.chunks.push_back(c);
      out.num_batched_tokens += n;
      budget -= n;
      s.num_computed += n;
      return true;
    }
    // Not one slot left: the newest running sequence gives its blocks back (possibly s).
    Sequence* victim = running_.back();
    preempt(*victim, out, budget);
    if (victim == &s) return false;
  }
}

ScheduleOutput Scheduler::schedule() {
  ScheduleOutput out;
  int64_t budget = config_.max_batched_tokens;

  // 0. The previous step ran (the caller removes the sequences of a failed step before asking
  //    again), so every computed token's K/V is written: commit the blocks that became full.
  for (Sequence* s : running_) {
    commit_executed(*s);
    release_out_of_window(*s);  // after the commit: released blocks stay cached
  }

  // 1. Decode: one token for every running sequence whose prompt is done. Iterate over a copy:
  //    preemption removes newer sequences from running_.
  std::vector<Sequence*> snapshot = running_;
  for (Sequence* s : snapshot) {
    if (s->status != SeqStatus::kRunning || s->num_uncomputed() != 1) continue;
    if (budget <= 0) break;
    schedule_running(*s, 1, out, budget);
  }
  // 2. Prefill chunks of running sequences whose prompt (or recompute) is not done yet.
  snapshot = running_;
  for (Sequence* s : snapshot) {
    if (s->status != SeqStatus::kRunning || s->num_uncomputed() <= 1) continue;
    if (budget <= 0) break;
    schedule_running(*s, chunk_limit(*s, budget), out, budget);
  }
  // 3. Admission, first come first served; none after a preemption (blocks are short) and none
  //    past the first sequence that does not fit or must wait, so nobody overtakes.
  while (out.preempted.empty() && !waiting_.empty() && int(running_.size()) < config_.max_seqs && budget > 0) {
    if (!admit_front(out, budget)) break;
  }
  return out;
}

bool Scheduler::admit_front(ScheduleOutput& out, int64_t& budget) {
  Sequence* s = waiting_.front();
  const int64_t bs = cache_.block_size();
  int64_t start = 0;  // tokens served from the cache
  int64_t n = 0;      // tokens to compute this step
  PrefixMatch match;
  if (prefix_cache_on()) {
    // At most num_tokens - 1 cached: the last token must run to give logits to sample from.
    const int64_t most_cached = s->compute_whole_prompt ? 0 : s->num_tokens() - 1;
    match = cache_.match_prefix(s->ns, s->tokens, most_cached);
    const int64_t k = match.num_blocks();
    // The next block it could still hit: if a running sequence is computing it, wait for it.
    if ((k + 1) * bs <= most_cached) {
      const std::span<const int32_t> next(s->tokens.data() + k * bs, size_t(bs));
      if (pending_.count(cache_.block_key(match.last_key(), s->ns, next)) != 0) {
        ++num_deferred_;
        return false;
      }
    }
    start = match.num_tokens;
    n = std::min(s->num_tokens() - start, chunk_limit(*s, budget));
    if (!cache_.can_allocate(match, start + n)) return false;
    Status st = cache_.allocate(s->id, start + n, match);
    KVS_ASSERT(st.ok(), "allocate failed after can_allocate");
  } else {
    n = std::min(s->num_uncomputed(), chunk_limit(*s, budget));
    if (!cache_.can_allocate(n)) return false;
    Status st = cache_.allocate(s->id, n);
    KVS_ASSERT(st.ok(), "allocate failed after can_allocate");
  }
  waiting_.pop_front();
  s->status = SeqStatus::kRunning;
  running_.push_back(s);  // newest running, older than every waiting: order holds
  s->num_cached_tokens = start;
  s->num_executed = start;
  if (prefix_cache_on()) add_pending(*s, match.num_blocks(), match.last_key());
  // A hit provided every block from 0; those before the first chunk's window go back at once.
  s->num_computed = start;
  release_out_of_window(*s);
  ScheduledChunk c;
  c.seq = s->id;
  c.start_pos = start;
  c.num_tokens = int32_t(n);
  c.sample = start + n == s->num_tokens();
  out.chunks.push_back(c);
  out.num_batched_tokens += n;
  budget -= n;
  s->num_computed = start + n;
  return true;
}

void Scheduler::add_pending(Sequence& s, int64_t first, const BlockHash& parent) {
  const int64_t bs = cache_.block_size();
  s.pending_first_block = first;
  s.pending_keys.clear();
  BlockHash key = parent;
  for (int64_t i = first; (i + 1) * bs <= s.num_tokens(); ++i) {
    key = cache_.block_key(key, s.ns, std::span<const int32_t>(s.tokens.data() + i * bs, size_t(bs)));
    s.pending_keys.push_back(key);
    ++pending_[key];
  }
}

void Scheduler::drop_pending(Sequence& s, int64_t upto_block) {
  while (!s.pending_keys.empty() && s.pending_first_block < upto_block) {
    auto it = pending_.find(s.pending_keys.front());
    KVS_ASSERT(it != pending_.end() && it->second > 0, "pending key not registered");
    if (--it->second == 0) pending_.erase(it);
    s.pending_keys.pop_front();
    ++s.pending_first_block;
  }
}

void Scheduler::release_out_of_window(Sequence& s) {
  if (config_.attention_window <= 0) return;
  // The next chunk starts at num_computed; its first token attends from here on.
  Expected<int32_t> r = cache_.release_before(s.id, s.num_computed + 1 - config_.attention_window);
  KVS_ASSERT(r.ok(), "window release of a running sequence");
}

Expected<KvShiftPlan> Scheduler::shift(SeqId id, int64_t keep, int64_t discard) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status != SeqStatus::kRunning) return invalid_argument("sequence " + std::to_string(id) + " is not running");
  if (s->num_executed != s->num_computed)
    return invalid_argument("sequence " + std::to_string(id) + " has K/V not yet written; shift after its step");
  KVS_ASSIGN_OR_RETURN(KvShiftPlan plan, cache_.shift(id, keep, discard));
  drop_pending(*s);
  s->tokens.erase(s->tokens.begin() + keep, s->tokens.begin() + keep + discard);
  s->num_computed -= discard;
  s->num_executed -= discard;
  // Prompt tokens that survive: those among the kept sinks plus those after the dropped run.
  s->num_prompt_tokens = s->num_prompt_tokens <= keep ? s->num_prompt_tokens
                                                       : std::max(keep, s->num_prompt_tokens - discard);
  ++s->num_shifts;
  return plan;
}

void Scheduler::commit_executed(Sequence& s) {
  s.num_executed = s.num_computed;
  if (!prefix_cache_on()) return;
  Status st = cache_.commit(s.id, std::span<const int32_t>(s.tokens.data(), size_t(s.num_executed)));
  KVS_ASSERT(st.ok(), "commit of a running sequence");
  // Executed blocks are no longer pending, committed or not (a collision may refuse them).
  drop_pending(s, s.num_executed / cache_.block_size());
}

Status Scheduler::append_token(SeqId id, int32_t token) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status != SeqStatus::kRunning || s->num_uncomputed() != 0)
    return invalid_argument("sequence " + std::to_string(id) + " has no sampled position to append to");
  commit_executed(*s);  // the step that sampled `token` ran: its K/V are written
  s->tokens.push_back(token);
  return Status::ok_status();
}

Status Scheduler::reset_computed(SeqId id) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status != SeqStatus::kRunning) return invalid_argument("sequence " + std::to_string(id) + " is not running");
  drop_pending(*s);
  KVS_RETURN_IF_ERROR(cache_.free(id));
  if (prefix_cache_on()) {
    // Keep the namespace for later commits; an empty match records no query.
    PrefixMatch none;
    none.ns = s->ns;
    KVS_RETURN_IF_ERROR(cache_.allocate(id, 0, none));
  } else {
    KVS_RETURN_IF_ERROR(cache_.allocate(id, 0));  // 0 tokens need no block: cannot fail
  }
  s->num_computed = 0;
  s->num_executed = 0;
  return Status::ok_status();
}

Status Scheduler::remove(SeqId id, bool kv_written) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status == SeqStatus::kRunning) {
    // Finished sequences leave their full blocks cached for later requests.
    if (kv_written) {
      commit_executed(*s);
    } else if (prefix_cache_on()) {
      Status st = cache_.commit(id, std::span<const int32_t>(s->tokens.data(), size_t(s->num_executed)));
      KVS_ASSERT(st.ok(), "commit of a running sequence");
    }
    drop_pending(*s);
    KVS_RETURN_IF_ERROR(cache_.free(id));
    running_.erase(std::find(running_.begin(), running_.end(), s));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  }
  seqs_.erase(id);
  return Status::ok_status();
}

Status Scheduler::verify() const {
  KVS_RETURN_IF_ERROR(cache_.verify());
  if (running_.size() + waiting_.size() != seqs_.size())
    return internal_error("running + waiting != number of sequences");
  if (int(running_.size()) > config_.max_seqs) return internal_error("more running sequences than max_seqs");
  if (cache_.num_seqs() != running_.size()) return internal_error("cache holds sequences that are not running");
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence* s = running_[i];
    const std::string name = "running sequence " + std::to_string(s->id);
    if (s->status != SeqStatus::kRunning) return internal_error(name + " is not marked running");
    if (!cache_.has_seq(s->id)) return internal_error(name + " holds no cache table");
    if (cache_.num_tokens(s->id) != s->num_computed) return internal_error(name + ": slots != num_computed");
    if (s->num_computed > s->num_tokens()) return internal_error(name + ": computed beyond its tokens");
    if (i > 0 && running_[i - 1]->arrival >= s->arrival) return internal_error("running not in arrival order");
    if (s->num_executed < 0 || s->num_executed > s->num_computed) return internal_error(name + ": executed beyond computed");
    if (prefix_cache_on()) KVS_RETURN_IF_ERROR(cache_.check_tokens(s->id, s->tokens));
  }
  // Pending keys: the counts are exactly the running sequences' pending keys.
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> pending;
  for (const Sequence* s : running_) {
    if (!s->pending_keys.empty() && (s->pending_first_block + 1) * cache_.block_size() <= s->num_executed)
      return internal_error("running sequence " + std::to_string(s->id) + " keeps executed blocks pending");
    for (const BlockHash& k : s->pending_keys) ++pending[k];
  }
  if (pending != pending_) return internal_error("pending block keys disagree with the running sequences");
  for (size_t i = 0; i < waiting_.size(); ++i) {
    const Sequence* s = waiting_[i];
    const std::string name = "waiting sequence " + std::to_string(s->id);
    if (s->status != SeqStatus::kWaiting) return internal_error(name + " is not marked waiting");
    if (cache_.has_seq(s->id)) return internal_error(name + " holds cache blocks");
    if (s->num_computed != 0) return internal_error(name + " counts computed tokens");
    if (!s->pending_keys.empty()) return internal_error(name + " has pending block keys");
    if (i > 0 && waiting_[i - 1]->arrival >= s->arrival) return internal_error("waiting not in arrival order");
  }
  if (!running_.empty() && !waiting_.empty() && running_.back()->arrival >= waiting_.front()->arrival)
    return internal_error("a waiting sequence arrived before a running one");
  return Status::ok_status();
}

}  // namespace kvserve
