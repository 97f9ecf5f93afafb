#include "engine/context_policy.h"

namespace kvserve {

Expected<ContextOverflow> parse_context_overflow(const std::string& text) {
  if (text == "error") return ContextOverflow::kError;
  if (text == "truncate") return ContextOverflow::kTruncate;
  return invalid_argument("context_overflow must be error or truncate, got '" + text + "'");
}

const char* context_overflow_name(ContextOverflow p) { return p == ContextOverflow::kError ? "error" : "truncate"; }

Expected<int64_t> fit_prompt(ContextOverflow p, std::vector<int32_t>& prompt, int64_t max_tokens, int64_t ctx,
                             int32_t bos) {
  const int64_t n = int64_t(prompt.size());
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
