#include "server/api_response.h"

#include <cmath>

namespace kvserve::server {

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const std::string& message, const std::string& type, const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

namespace {
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}
// Token pieces can be partial UTF-8 (byte tokens); the replace handler in dump_json turns
// those into U+FFFD, and `bytes` keeps the exact value.
}  // namespace

json completion_logprobs_json(const std::vector<TokenLogprob>& lps, const PieceFn& piece, int64_t offset0) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t off = offset0;
  for (const auto& lp : lps) {
    std::string p = piece(lp.token);
    tokens.push_back(p);
    if (std::isnan(lp.logprob)) {
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      token_lps.push_back(lp.logprob);
      json top = json::object();
      for (const auto& [id, v] : lp.top) top[piece(id)] = v;
      tops.push_back(top);
    }
    offsets.push_back(off);
    off += int64_t(p.size());
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs_json(const std::vector<TokenLogprob>& lps, const PieceFn& piece) {
  json content = json::array();
  for (const auto& lp : lps) {
    std::string p = piece(lp.token);
    json top = json::array();
    for (const auto& [id, v] : lp.top) {
      std::string tp = piece(id);
      top.push_back({{"token", tp}, {"logprob", v}, {"bytes", bytes_of(tp)}});
    }
    content.push_back({{"token", p}, {"logprob", lp.logprob}, {"bytes", bytes_of(p)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

std::string openai_finish_reason(const std::string& r) { return r.empty() ? "stop" : r; }

}  // namespace kvserve::server
