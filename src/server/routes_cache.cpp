// The prefix cache's admin API:
//   POST   /cache/pin    {"prompt": "..."} or {"messages": [...]}, optional "cache_salt"
//                        → 200 {"pinned_tokens", "prompt_tokens"}   (runs the prompt if needed)
//   DELETE /cache/pin    same body → 200 {"unpinned_tokens", "prompt_tokens"};
//                        {"all": true} → 200 {"unpinned_blocks"}: every pin removed
//   GET    /cache/stats  → blocks by state, bytes, hit rates (recent and since start), evictions
//   POST   /cache/flush  → 200 {"flushed_blocks"}: drops every unreferenced, unpinned cached block
// The prompt is tokenized exactly as /v1/completions (prompt) or /v1/chat/completions (messages)
// would, so a pinned prefix is the one those requests hit.
#include <chrono>

#include "server/api_response.h"
#include "server/json_body.h"
#include "server/server_state.h"

namespace kvserve::server {
namespace {

using namespace std::chrono_literals;

// The engine answers admin calls between two steps; a step is milliseconds, a pin runs a prompt.
constexpr auto kAdminTimeout = 5s;

// Maps an engine error to a status code and an OpenAI-style error body.
void reply_status(httplib::Response& res, const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return reply_error(res, 400, s.message(), "invalid_request_error", "invalid_value");
    case StatusCode::kOutOfMemory:
      return reply_error(res, 409, s.message(), "invalid_request_error", "pin_limit");
    case StatusCode::kUnsupported:
      return reply_error(res, 409, s.message(), "invalid_request_error", "prefix_cache_off");
    case StatusCode::kUnavailable:
      return reply_error(res, 503, s.message(), "service_unavailable", "unavailable");
    default:
      return reply_error(res, 500, s.message(), "server_error");
  }
}

// The prompt tokens a pin body names, with its salt; a 400 is already written on failure.
bool pin_target(ServerState& st, const httplib::Request& req, httplib::Response& res, std::vector<int32_t>* tokens,
                std::string* salt) {
  auto parsed = parse_json_body(req.body);
  if (!parsed.ok()) {
    reply_error(res, 400, parsed.status().message(), "invalid_request_error", "invalid_json");
    return false;
  }
  const json& j = *parsed;
  if (!j.is_object()) {
    reply_error(res, 400, "body: expected a JSON object with \"prompt\" or \"messages\"", "invalid_request_error",
                "invalid_json");
    return false;
  }
  const Route route = j.contains("messages") ? Route::kChat : Route::kCompletion;
  auto api = parse_api_request(req.body, route, st.limits);
  if (!api.ok()) {
    reply_status(res, api.status());
    return false;
  }
  if (api->prompts.size() > 1) {
    reply_error(res, 400, "prompt: pin one prompt at a time", "invalid_request_error", "invalid_value");
    return false;
  }
  auto toks = prompt_tokens(st, *api);
  if (!toks.ok()) {
    reply_status(res, toks.status());
    return false;
  }
  *tokens = std::move(*toks);
  *salt = api->cache_salt;
  return true;
}

json stats_json(const EngineStats& s) {
  const PrefixCacheInfo& p = s.prefix;
  const auto rate = [](int64_t hits, int64_t queries) { return queries > 0 ? double(hits) / double(queries) : 0.0; };
  const auto bytes = [&](int64_t blocks) { return blocks * int64_t(s.kv_block_bytes); };  // integers in JSON
  return json{
      {"enabled", p.enabled},
      {"block_bytes", s.kv_block_bytes},
      {"blocks",
       {{"total", s.kv_blocks_total},
        {"used", s.kv_blocks_used},
        {"cached", p.blocks_cached},
        {"free", p.blocks_free},
        {"pinned", p.blocks_pinned},
        {"pinned_cap", p.blocks_pinned_cap}}},
      {"bytes",
       {{"total", bytes(s.kv_blocks_total)},
        {"used", bytes(s.kv_blocks_used)},
        {"cached", bytes(p.blocks_cached)},
        {"pinned", bytes(p.blocks_pinned)}}},
      {"hit_rate",
       {{"recent", rate(p.recent_hit_tokens, p.recent_query_tokens)},
        {"since_start", rate(p.hit_tokens_total, p.query_tokens_total)}}},
      {"recent_window_queries", 1000},
      {"query_tokens_total", p.query_tokens_total},
      {"hit_tokens_total", p.hit_tokens_total},
      {"evictions_total", p.evictions_total},
  };
}

}  // namespace

void register_cache_routes(httplib::Server& svr, ServerState& st) {
  add_route(svr, st, "POST", "/cache/pin", [&st](const httplib::Request& req, httplib::Response& res) {
    if (!require_engine(st, res)) return;
    std::vector<int32_t> tokens;
    std::string salt;
    if (!pin_target(st, req, res, &tokens, &salt)) return;
    const int64_t n = int64_t(tokens.size());
    // A pin runs its prompt like a request, so it gets a request's time (10 min without a limit).
    const double limit = st.cfg.request_timeout > 0 ? st.cfg.request_timeout : 600;
    auto pinned =
        st.engine->pin_prefix(std::move(tokens), salt, std::chrono::milliseconds(int64_t(limit * 1000)));
    if (!pinned.ok()) return reply_status(res, pinned.status());
    reply_json(res, 200, json{{"pinned_tokens", *pinned}, {"prompt_tokens", n}});
  });
  add_route(svr, st, "DELETE", "/cache/pin", [&st](const httplib::Request& req, httplib::Response& res) {
    if (!require_engine(st, res)) return;
    const json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("all")) {
      if (!j["all"].is_boolean() || !j["all"].get<bool>())
        return reply_error(res, 400, "all: expected true", "invalid_request_error", "invalid_value");
      auto n = st.engine->unpin_all(kAdminTimeout);
      if (!n.ok()) return reply_status(res, n.status());
      return reply_json(res, 200, json{{"unpinned_blocks", *n}});
    }
    std::vector<int32_t> tokens;
    std::string salt;
    if (!pin_target(st, req, res, &tokens, &salt)) return;
    const int64_t n = int64_t(tokens.size());
    auto unpinned = st.engine->unpin_prefix(std::move(tokens), salt, kAdminTimeout);
    if (!unpinned.ok()) return reply_status(res, unpinned.status());
    reply_json(res, 200, json{{"unpinned_tokens", *unpinned}, {"prompt_tokens", n}});
  });
  add_route(svr, st, "GET", "/cache/stats", [&st](const httplib::Request&, httplib::Response& res) {
    if (!require_engine(st, res)) return;
    reply_json(res, 200, stats_json(st.engine->stats()));
  });
  add_route(svr, st, "POST", "/cache/flush", [&st](const httplib::Request&, httplib::Response& res) {
    if (!require_engine(st, res)) return;
    auto flushed = st.engine->flush_prefix_cache(kAdminTimeout);
    if (!flushed.ok()) return reply_status(res, flushed.status());
    reply_json(res, 200, json{{"flushed_blocks", *flushed}});
  });
}

}  // namespace kvserve::server
