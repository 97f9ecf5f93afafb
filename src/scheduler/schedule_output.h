// What one engine step runs: a list of chunks, each a contiguous run of one sequence's tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/sequence.h"

namespace kvserve {

struct ScheduledChunk {
  SeqId seq = 0;
  int64_t start_pos = 0;   // first position of the chunk; the cache holds [0, start_pos)
  int32_t num_tokens = 0;  // >= 1; the sequence's tokens [start_pos, start_pos + num_tokens)
  // The chunk reaches the sequence's last token, so its logits give the next token. False for
  // the leading chunks of a prompt split by chunked prefill.
  bool sample = false;
};

struct ScheduleOutput {
  // Decode chunks (one token each) first, then prefill chunks, oldest sequence first.
  std::vector<ScheduledChunk> chunks;
  std::vector<SeqId> preempted;  // sent back to waiting during this schedule() call
  int64_t num_batched_tokens = 0;  // sum of chunks' num_tokens, <= max_batched_tokens

  bool empty() const { return chunks.empty(); }
};

}  // namespace kvserve
