// What happens when a prompt and the tokens it asks for do not fit in the context
// (`--context-overflow`, key `context_overflow`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace kvserve {

enum class ContextOverflow : uint8_t {
  kError,     // refuse up front (HTTP 400) when prompt + max_tokens > context
  kTruncate,  // drop the oldest prompt tokens (the BOS stays) until it fits
  kShift,     // StreamingLLM: when the context is full, keep the first n_keep tokens (attention
              // sinks), drop the oldest after them and re-rotate the kept keys; generate on
};

// "error" | "truncate" | "shift"; invalid_argument naming the accepted values otherwise.
Expected<ContextOverflow> parse_context_overflow(const std::string& text);
const char* context_overflow_name(ContextOverflow p);

// Makes prompt + max_tokens fit in ctx tokens under policy `p`, editing `prompt` in place.
// kTruncate keeps prompt[0] when it is `bos` (>= 0) and drops the tokens right after it; at
// least one prompt token besides the BOS always remains. invalid_argument (stating the sizes)
// when it cannot fit: always under kError, and under kTruncate when max_tokens alone leaves
// no room. kShift ignores max_tokens (generation shifts the context as it goes) and only makes
// the prompt itself fit: it keeps the first n_keep tokens and drops the ones right after them.
// Returns the number of tokens dropped.
Expected<int64_t> fit_prompt(ContextOverflow p, std::vector<int32_t>& prompt, int64_t max_tokens, int64_t ctx,
                             int32_t bos, int64_t n_keep = 0);

// Tokens a shift drops when a sequence fills ctx: half of what follows the n_keep sinks, rounded
// down to whole KV blocks (a shift moves whole blocks). invalid_argument, stating the sizes, when
// that is less than one block (ctx too small for n_keep) or n_keep < 0.
Expected<int64_t> shift_discard(int64_t ctx, int64_t n_keep, int block_size);

// What a run (Engine or Generator) does at a full context and how far it attends.
struct ContextPlan {
  int64_t window = 0;   // sliding attention window, 0 for none
  int64_t keep = 0;     // kShift: sink tokens one shift keeps
  int64_t discard = 0;  // kShift: tokens one shift drops
};
// window = window_flag when > 0, else the model's own (GGUF sliding_window). invalid_argument
// for a negative flag or n_keep, for kShift together with a window (a window already bounds KV
// memory), and for a context too small to shift (shift_discard).
Expected<ContextPlan> plan_context(ContextOverflow p, int64_t window_flag, int64_t model_window, int64_t ctx,
                                   int64_t n_keep, int block_size);

}  // namespace kvserve
