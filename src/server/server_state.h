// State shared by the HTTP handlers of one `kvserve serve` process.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kvserve/engine.h"
#include "server/api_request.h"
#include "server/chat_template.h"
#include "server/config.h"
#include "server/server_metrics.h"

namespace kvserve::server {

struct ServerState {
  ServerConfig cfg;
  ApiLimits limits;
  // Both set once by the loader thread before `ready` becomes true; handlers read them only after
  // seeing `ready` (acquire), so no lock is needed.
  std::unique_ptr<Engine> engine;
  std::string model_id;  // what /v1/models and every answer call the model (served_model_name)
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};  // SIGTERM received: new generation requests get 503
  ChatFamily chat_family = ChatFamily::kPlain;
  ServerMetrics metrics;
  std::atomic<int> in_flight{0};       // generation requests not yet fully answered
  std::atomic<uint64_t> next_id{1};    // server-side request ids (X-Request-Id, logs)
  std::atomic<uint64_t> responses{0};  // every response written, any route (the idle trim's cue)
  int64_t started_unix = 0;
  bool json_logs = false;
  std::string api_key;  // resolved from api_key / api_key_file; "" = no key required
  // Every registered path and its methods ("POST", "GET, HEAD", ...), filled by add_route before
  // the server listens and read-only after: a known path asked with another method gets 405
  // with this as its Allow header instead of httplib's 404.
  std::map<std::string, std::string> route_methods;
};

// Counts a generation request as in flight for as long as a copy is alive (the streaming
// provider keeps one until the stream ends).
class InFlight {
 public:
  explicit InFlight(ServerState* st) : st_(st) { st_->in_flight.fetch_add(1); }
  ~InFlight() { st_->in_flight.fetch_sub(1); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  ServerState* st_;
};

// Writes an OpenAI-style error body with `status`.
void reply_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                 const std::string& code = "");

// Writes `j` as an application/json body with `status`.
void reply_json(httplib::Response& res, int status, const nlohmann::json& j);
// Routes that need the model answer 503 "loading" until it is loaded; true when it is.
bool require_engine(ServerState& st, httplib::Response& res);

using RouteFn = std::function<void(const httplib::Request&, httplib::Response&)>;
// Wraps a handler so that no exception escapes: any throw becomes a 500 JSON error.
httplib::Server::Handler guarded(RouteFn fn);

// Registers `fn` (guarded) for `method` ("GET", "POST" or "DELETE") on `path` and records the pair
// in st.route_methods. (A GET route answers HEAD too, as httplib does.)
void add_route(httplib::Server& svr, ServerState& st, const std::string& method, const std::string& path,
               RouteFn fn);

// Route registration (routes_generate.cpp, routes_misc.cpp, routes_cache.cpp).
void register_generate_routes(httplib::Server& svr, ServerState& st);
void register_misc_routes(httplib::Server& svr, ServerState& st);
void register_cache_routes(httplib::Server& svr, ServerState& st);

// The token ids of a parsed request's prompt k (chat: the rendered messages), tokenized as its
// route does (chat: special tokens parsed); invalid_argument with a client-facing message otherwise.
Expected<std::vector<int32_t>> prompt_tokens(ServerState& st, const ApiRequest& api, size_t k = 0);

}  // namespace kvserve::server
