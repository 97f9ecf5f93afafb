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
//
// Prefix cache (SchedulerConfig::enable_prefix_cache and the manager's option both on):
//  - admission matches the longest cached prefix of the sequence's tokens under its namespace,
//    leaving at least the last token to compute (its logits give the next token); the matched
//    blocks are shared (ref + 1), num_computed starts at the matched tokens, and only the rest
//    is prefilled, within the token budget;
//  - full blocks whose K/V are written (Sequence::num_executed) are committed to the index at
//    the start of the next schedule(), at append_token() and at remove();
//  - a waiting sequence whose next uncached full block (one it could hit) is being computed by
//    a running sequence (a "pending" key) is not admitted yet: it stays at the front, admission
//    stops for this step, and once that block is committed it hits. The owner is running and
//    the oldest running sequence always progresses; a preempted or removed owner drops its
//    pending keys; so the wait is bounded and nothing deadlocks.
// With prefix caching off, admission, growth and preemption are exactly those above.
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
  bool enable_prefix_cache = true;  // also needs the KvCacheManager's option on
  // Sliding attention window in tokens (0: none). Each step, before a running sequence's next
  // chunk, its blocks wholly before that chunk's first window are released (and stay cached
  // when committed), so a sequence holds O(window) KV memory.
  int64_t attention_window = 0;
  // Tokens per step at most for a sequence that computes its whole prompt (compute_whole_prompt:
  // the caller wants every position's logits), so that a step's logits stay that many rows of
  // the vocabulary (64 x 128K floats = 32 MiB) whatever max_batched_tokens is.
  int64_t max_all_logits_chunk = 64;
};

class Scheduler {
 public:
  // The manager must outlive the scheduler; the scheduler is its only mutator.
  Scheduler(const SchedulerConfig& config, KvCacheManager& cache);

  // Queues a new sequence at the back of the waiting queue; its blocks are shared and cached
  // under namespace ns. invalid_argument for an id in use or an empty prompt.
  // compute_whole_prompt: admit without prefix hits (Sequence::compute_whole_prompt).
  Status add(SeqId id, std::vector<int32_t> prompt, BlockHash ns = {}, bool compute_whole_prompt = false);

  // Plans one step and reserves its KV slots. The caller then runs every chunk and, for each
  // chunk with `sample`, calls append_token() or remove(). Chunks count as computed from here.
  ScheduleOutput schedule();

  // Appends a sampled token to a running sequence whose chunk had `sample` set.
  Status append_token(SeqId id, int32_t token);

  // Context shift of a running sequence whose sampled token was just appended (all its computed
  // K/V written): keeps its first `keep` tokens, drops the next `discard` (a multiple of the
  // block size) from its tokens and its KV blocks (KvCacheManager::shift), and returns the plan
  // the engine must carry out on the KV memory before the next step. The sequence never commits
  // to the prefix cache again until it is recomputed (after a preemption: its current tokens
  // computed from scratch are ordinary prefix-cache content). Errors as KvCacheManager::shift,
  // plus not_found / invalid_argument for an unknown or not running sequence, or one with
  // K/V not yet written; nothing changes on error.
  Expected<KvShiftPlan> shift(SeqId id, int64_t keep, int64_t discard);

  // Forgets the K/V of a running sequence so it is computed again from position 0 (the
  // no-cache baseline); the sequence keeps running.
  Status reset_computed(SeqId id);

  // Drops a sequence (finished, cancelled, failed), freeing its blocks. not_found if unknown.
  // kv_written: the step that ran the sequence's last scheduled chunk completed, so the K/V of
  // all its computed tokens are written and its full blocks may be committed to the prefix
  // cache first. Pass false when that step failed (the pass wrote nothing): only blocks known
  // written earlier are committed.
  Status remove(SeqId id, bool kv_written = true);

  const Sequence* find(SeqId id) const;
  // Running sequences in arrival order; waiting ones in queue order.
  std::vector<SeqId> running_ids() const;
  std::vector<SeqId> waiting_ids() const;
  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  bool prefix_cache_on() const { return config_.enable_prefix_cache && cache_.prefix_cache_enabled(); }
  // Admissions deferred because their next block was being computed by a running sequence.
  int64_t num_deferred_admissions() const { return num_deferred_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

  // Scheduler invariants plus KvCacheManager::verify(): every running sequence holds exactly
  // num_computed slots, waiting ones hold none, the two sets are disjoint, running is sorted by
  // arrival and every running arrival precedes every waiting one; with the prefix cache, the
  // indexed blocks of every running sequence hold its own tokens and the pending-key counts
  // match the running sequences' pending keys.
  Status verify() const;

 private:
  // Gives running sequence `s` a chunk of at most max_tokens tokens, shrinking it to the free
  // KV slots and preempting newer sequences when not even one token fits. False when `s`
  // itself was preempted or nothing could be scheduled for it.
  bool schedule_running(Sequence& s, int64_t max_tokens, ScheduleOutput& out, int64_t& budget);
  // The most tokens s may run this step out of `budget` (max_all_logits_chunk for a sequence
  // that computes its whole prompt).
  int64_t chunk_limit(const Sequence& s, int64_t budget) const;
  // Tokens that can be appended to s without a new block beyond the free ones.
  int64_t appendable_tokens(const Sequence& s) const;
  void preempt(Sequence& s, ScheduleOutput& out, int64_t& budget);
  Sequence* get(SeqId id);
  // Admits the front waiting sequence if it fits (prefix hit first when on). False when it
  // does not fit or must wait for a pending block.
  bool admit_front(ScheduleOutput& out, int64_t& budget);
  // Marks s's computed tokens as written and commits its full blocks (prefix cache on).
  void commit_executed(Sequence& s);
  // Releases s's blocks before the window of its next chunk (attention_window > 0).
  void release_out_of_window(Sequence& s);
  // Registers the keys of s's full blocks from block `first` on as pending.
  void add_pending(Sequence& s, int64_t first, const BlockHash& parent);
  // Drops s's pending keys for blocks before `upto_block` (all of them by default).
  void drop_pending(Sequence& s, int64_t upto_block = INT64_MAX);

  SchedulerConfig config_;
  KvCacheManager& cache_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // sorted by arrival
  std::deque<Sequence*> waiting_;   // admission order: front first
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_deferred_ = 0;
  // Keys of full blocks running sequences are computing -> how many such sequences.
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> pending_;
};

}  // namespace kvserve
