// Sequence: what the scheduler knows about one request. Metadata only: token ids and how
// many of them have K/V in the cache; sampling state and text live in the engine.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace kvserve {

using SeqId = KvCacheManager::SeqId;

enum class SeqStatus : uint8_t {
  kWaiting,  // queued (new, or preempted: holds no KV blocks)
  kRunning,  // holds KV blocks for positions [0, num_computed) and is scheduled each step
};

struct Sequence {
  SeqId id = 0;
  uint64_t arrival = 0;              // admission order key: lower arrived first
  std::vector<int32_t> tokens;       // prompt followed by the generated tokens
  int64_t num_prompt_tokens = 0;
  // Tokens whose K/V are in the cache (or scheduled into it this step). After a preemption this
  // drops to 0 and the prompt and every generated token are computed again (recompute), which
  // reproduces the same K/V; a prefix-cache hit at re-admission skips what is still cached.
  int64_t num_computed = 0;
  int64_t num_preemptions = 0;
  int64_t num_shifts = 0;            // context shifts (Scheduler::shift)
  SeqStatus status = SeqStatus::kWaiting;

  // Prefix cache. ns: the namespace its blocks are cached under ({} when the caller has none).
  BlockHash ns;
  // Every prompt position must run (its logits are wanted): admission takes no prefix hit, and
  // its chunks hold at most SchedulerConfig::max_all_logits_chunk tokens. Its blocks are still
  // committed for others.
  bool compute_whole_prompt = false;
  // Tokens served from the prefix cache at the (last) admission.
  int64_t num_cached_tokens = 0;
  // Tokens whose K/V are known to be written: num_computed as of the last step that ran (the
  // scheduler learns it when the next step is planned, a token is appended, or the sequence is
  // removed after its step). Only these may be committed to the prefix index.
  int64_t num_executed = 0;
  // Keys of this running sequence's full blocks not yet executed, for blocks
  // [pending_first_block, pending_first_block + pending_keys.size()): other sequences with the
  // same next block wait for them instead of computing them again (Scheduler::schedule).
  int64_t pending_first_block = 0;
  std::deque<BlockHash> pending_keys;

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to run through the model before the next token can be sampled.
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace kvserve
