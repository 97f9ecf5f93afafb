#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

namespace kvserve {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& cache) : config_(config), cache_(cache) {
  KVS_ASSERT(config_.max_seqs >= 1, "max_seqs must be >= 1");
  KVS_ASSERT(config_.max_batched_tokens >= 1, "max_batched_tokens must be >= 1");
}

Status Scheduler::add(SeqId id, std::vector<int32_t> prompt) {
  if (seqs_.count(id) != 0) return invalid_argument("sequence " + std::to_string(id) + " already exists");
  if (prompt.empty()) return invalid_argument("sequence " + std::to_string(id) + " has an empty prompt");
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->arrival = next_arrival_++;
  s->num_prompt_tokens = int64_t(prompt.size());
  s->tokens = std::move(prompt);
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
  Status st = cache_.free(s.id);
  KVS_ASSERT(st.ok(), "a running sequence holds KV blocks");
  s.num_computed = 0;
  s.status = SeqStatus::kWaiting;
  ++s.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  // It arrived before every waiting sequence (admission is FCFS), so the front keeps order.
  waiting_.push_front(&s);
  out.preempted.push_back(s.id);
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
    schedule_running(*s, budget, out, budget);
  }
  // 3. Admission, first come first served; none after a preemption (blocks are short) and none
  //    past the first sequence that does not fit, so nobody overtakes.
  while (out.preempted.empty() && !waiting_.empty() && int(running_.size()) < config_.max_seqs && budget > 0) {
    Sequence* s = waiting_.front();
    const int64_t n = std::min(s->num_uncomputed(), budget);
    if (!cache_.can_allocate(n)) break;
    Status st = cache_.allocate(s->id, n);
    KVS_ASSERT(st.ok(), "allocate failed after can_allocate");
    waiting_.pop_front();
    s->status = SeqStatus::kRunning;
    running_.push_back(s);  // newest running, older than every waiting: order holds
    ScheduledChunk c;
    c.seq = s->id;
    c.start_pos = 0;
    c.num_tokens = int32_t(n);
    c.sample = n == s->num_tokens();
    out.chunks.push_back(c);
    out.num_batched_tokens += n;
    budget -= n;
    s->num_computed = n;
  }
  return out;
}

Status Scheduler::append_token(SeqId id, int32_t token) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status != SeqStatus::kRunning || s->num_uncomputed() != 0)
    return invalid_argument("sequence " + std::to_string(id) + " has no sampled position to append to");
  s->tokens.push_back(token);
  return Status::ok_status();
}

Status Scheduler::reset_computed(SeqId id) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status != SeqStatus::kRunning) return invalid_argument("sequence " + std::to_string(id) + " is not running");
  KVS_RETURN_IF_ERROR(cache_.free(id));
  KVS_RETURN_IF_ERROR(cache_.allocate(id, 0));  // 0 tokens need no block: cannot fail
  s->num_computed = 0;
  return Status::ok_status();
}

Status Scheduler::remove(SeqId id) {
  Sequence* s = get(id);
  if (s == nullptr) return not_found("sequence " + std::to_string(id));
  if (s->status == SeqStatus::kRunning) {
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
  }
  for (size_t i = 0; i < waiting_.size(); ++i) {
    const Sequence* s = waiting_[i];
    const std::string name = "waiting sequence " + std::to_string(s->id);
    if (s->status != SeqStatus::kWaiting) return internal_error(name + " is not marked waiting");
    if (cache_.has_seq(s->id)) return internal_error(name + " holds cache blocks");
    if (s->num_computed != 0) return internal_error(name + " counts computed tokens");
    if (i > 0 && waiting_[i - 1]->arrival >= s->arrival) return internal_error("waiting not in arrival order");
  }
  if (!running_.empty() && !waiting_.empty() && running_.back()->arrival >= waiting_.front()->arrival)
    return internal_error("a waiting sequence arrived before a running one");
  return Status::ok_status();
}

}  // namespace kvserve
