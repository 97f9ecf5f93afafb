#include "engine/context_policy.h"

#include <algorithm>

namespace kvserve {

Expected<ContextOverflow> parse_context_overflow(const std::string& text) {
  if (text == "error") return ContextOverflow::kError;
  if (text == "truncate") return ContextOverflow::kTruncate;
  if (text == "shift") return ContextOverflow::kShift;
  return invalid_argument("context_overflow must be error, truncate or shift, got '" + text + "'");
}

const char* context_overflow_name(ContextOverflow p) {
  switch (p) {
    case ContextOverflow::kError: return "error";
    case ContextOverflow::kTruncate: return "truncate";
    case ContextOverflow::kShift: return "shift";
  }
  return "?";
}

Expected<int64_t> shift_discard(int64_t ctx, int64_t n_keep, int block_size) {
  const int64_t d = n_keep < 0 ? 0 : (ctx - n_keep) / 2 / block_size * block_size;
  if (d < block_size)
    return invalid_argument("context_overflow shift needs half of the context after the n_keep " +
                            std::to_string(n_keep) + " kept tokens to hold at least one KV block of " +
                            std::to_string(block_size) + " tokens; the context is " + std::to_string(ctx) + " tokens");
  return d;
}

Expected<ContextPlan> plan_context(ContextOverflow p, int64_t window_flag, int64_t model_window, int64_t ctx,
                                   int64_t n_keep, int block_size) {
  if (window_flag < 0) return invalid_argument("attention_window must be >= 0, got " + std::to_string(window_flag));
  ContextPlan plan;
  plan.window = window_flag > 0 ? window_flag : model_window;
  if (p != ContextOverflow::kShift) return plan;
  if (plan.window > 0)
    return invalid_argument("context_overflow shift cannot be combined with a sliding attention window (" +
                            std::to_string(plan.window) +
                            (window_flag > 0 ? " tokens from attention_window)" : " tokens from the model)") +
                            "; a window already bounds KV memory: use error or truncate with it");
  KVS_ASSIGN_OR_RETURN(plan.discard, shift_discard(ctx, n_keep, block_size));
  plan.keep = std::min(n_keep, ctx - plan.discard);
  return plan;
}

Expected<int64_t> fit_prompt(ContextOverflow p, std::vector<int32_t>& prompt, int64_t max_tokens, int64_t ctx,
                             int32_t bos, int64_t n_keep) {
  const int64_t n = int64_t(prompt.size());
  if (p == ContextOverflow::kShift) {
    if (n <= ctx) return int64_t(0);
    const int64_t keep = std::min(std::max<int64_t>(n_keep, 0), ctx - 1);
    prompt.erase(prompt.begin() + keep, prompt.begin() + keep + (n - ctx));
    return n - ctx;
  }
  const int64_t need = n + max_tokens;
  if (need <= ctx) return int64_t(0);
  const std::string sizes = "prompt of " + std::to_string(n) + " tokens + max_tokens " + std::to_string(max_tokens) +
                            " = " + std::to_string(need) + " tokens exceeds the context length of " +
                            std::to_string(ctx) + " tokens";
  if (p == ContextOverflow::kError) return invalid_argument(sizes);
  const int64_t keep_head = (!prompt.empty() && bos >= 0 && prompt[0] == bos) ? 1 : 0;
  const int64_t room = ctx - max_tokens;  // prompt tokens that fit
  if (room < keep_head + 1) return invalid_argument(sizes + ", and max_tokens leaves no room to truncate into");
  const int64_t drop = n - room;
  prompt.erase(prompt.begin() + keep_head, prompt.begin() + keep_head + drop);
  return drop;
}

}  // namespace kvserve
