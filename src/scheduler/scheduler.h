// Scheduler: decides, each step, which sequences run and which tokens of each, under a token
// budget and the KV blocks available. It owns the Sequences and drives the KvCacheManager
// (query, then mutate); it never calls the model.
//
// Policy (continuous batching):
//  1. running sequences with one token left (decode) get it, oldest first;
//  2. running sequences still in their prompt get the next chunk, oldest first;
//  3. waiting sequences are admitted first-come first-served while the budget, max_seqs and
//     the free blocks allow; a prompt longer than the remaining budget is split (chunked
//     prefill) and only the chunk that ends it samples a token.
// When a running sequence needs a block and none is free, the newest running sequence is
// preempted: its blocks are freed and it goes back to the front of the waiting queue, to be
// recomputed (prompt + generated tokens) when admitted again. Admission stops at the first
// waiting sequence that does not fit (no overtaking), so every running sequence arrived before
// every waiting one, and the oldest running sequence can always progress: nothing deadlocks as
// long as one sequence of the longest allowed length fits in the whole pool.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "scheduler/schedule_output.h"
#include "scheduler/sequence.h"
#include "util/status.h"

namespace kvserve {

struct SchedulerConfig {
  int max_seqs = 16;            // running sequences at most
  int max_batched_tokens = 512; // tokens per step (the forward batch)
};

class Scheduler {
 public:
  // The manager must outlive the scheduler; the scheduler is its only mutator.
  Scheduler(const SchedulerConfig& config, KvCacheManager& cache);

  // Queues a new sequence at the back of the waiting queue. invalid_argument for an id in use
  // or an empty prompt.
  Status add(SeqId id, std::vector<int32_t> prompt);

  // Plans one step and reserves its KV slots. The caller then runs every chunk and, for each
  // chunk with `sample`, calls append_token() or remove(). Chunks count as computed from here.
  ScheduleOutput schedule();

  // Appends a sampled token to a running sequence whose chunk had `sample` set.
  Status append_token(SeqId id, int32_t token);

  // Forgets the K/V of a running sequence so it is computed again from position 0 (the
  // no-cache baseline); the sequence keeps running.
  Status reset_computed(SeqId id);

  // Drops a sequence (finished, cancelled, failed), freeing its blocks. not_found if unknown.
  Status remove(SeqId id);

  const Sequence* find(SeqId id) const;
  // Running sequences in arrival order; waiting ones in queue order.
  std::vector<SeqId> running_ids() const;
  std::vector<SeqId> waiting_ids() const;
  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

  // Scheduler invariants plus KvCacheManager::verify(): every running sequence holds exactly
  // num_computed slots, waiting ones hold none, the two sets are disjoint, running is sorted by
  // arrival and every running arrival precedes every waiting one.
  Status verify() const;

 private:
  // Gives running sequence `s` a chunk of at most max_tokens tokens, shrinking it to the free
  // KV slots and preempting newer sequences when not even one token fits. False when `s`
  // itself was preempted or nothing could be scheduled for it.
  bool schedule_running(Sequence& s, int64_t max_tokens, ScheduleOutput& out, int64_t& budget);
  // Tokens that can be appended to s without a new block beyond the free ones.
  int64_t appendable_tokens(const Sequence& s) const;
  void preempt(Sequence& s, ScheduleOutput& out, int64_t& budget);
  Sequence* get(SeqId id);

  SchedulerConfig config_;
  KvCacheManager& cache_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // sorted by arrival
  std::deque<Sequence*> waiting_;   // admission order: front first
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace kvserve
