// GET /health, /live, /metrics, /v1/models; POST /tokenize, /detokenize.
#include <utility>

#include "server/api_response.h"
#include "server/json_body.h"
#include "server/server_state.h"

namespace kvserve::server {

void reply_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                 const std::string& code) {
  res.status = status;
  res.set_content(dump_json(error_json(message, type, code)), "application/json");
}

httplib::Server::Handler guarded(RouteFn fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const std::exception& e) {
      reply_error(res, 500, std::string("internal error: ") + e.what(), "server_error");
    } catch (...) {
      reply_error(res, 500, "internal error", "server_error");
    }
  };
}

void add_route(httplib::Server& svr, ServerState& st, const std::string& method, const std::string& path,
               RouteFn fn) {
  std::string& methods = st.route_methods[path];
  const std::string listed = method == "GET" ? "GET, HEAD" : method;
  methods = methods.empty() ? listed : methods + ", " + listed;
  if (method == "GET") {
    svr.Get(path, guarded(std::move(fn)));
  } else if (method == "POST") {
    svr.Post(path, guarded(std::move(fn)));
  } else if (method == "DELETE") {
    svr.Delete(path, guarded(std::move(fn)));
  } else {
    throw std::logic_error("add_route: unsupported method " + method);
  }
}

void reply_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

bool require_engine(ServerState& st, httplib::Response& res) {
  if (st.ready.load(std::memory_order_acquire)) return true;
  reply_error(res, 503, "the model is still loading", "service_unavailable", "loading");
  return false;
}

namespace {

// The served model as OpenAI's model object.
json model_json(const ServerState& st) {
  return json{{"id", st.model_id},
              {"object", "model"},
              {"created", st.started_unix},
              {"owned_by", "kvserve"},
              {"max_model_len", st.engine->context_length()}};
}

// The body as a JSON object; false with a 400 written when it is not JSON or not an object.
bool object_body(const httplib::Request& req, httplib::Response& res, json* out) {
  auto parsed = parse_json_body(req.body);
  if (!parsed.ok()) {
    reply_error(res, 400, parsed.status().message(), "invalid_request_error", "invalid_value");
    return false;
  }
  if (!parsed->is_object()) {
    reply_error(res, 400, "body: expected a JSON object", "invalid_request_error", "invalid_value");
    return false;
  }
  *out = std::move(*parsed);
  return true;
}

void handle_tokenize(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  if (!require_engine(st, res)) return;
  json j;
  if (!object_body(req, res, &j)) return;
  const char* field = j.contains("content") ? "content" : "prompt";
  if (!j.contains(field) || !j[field].is_string())
    return reply_error(res, 400, "content: expected a string (or \"prompt\")", "invalid_request_error",
                       "invalid_value");
  bool add_special = true, parse_special = false;
  if (j.contains("add_special")) {
    if (!j["add_special"].is_boolean())
      return reply_error(res, 400, "add_special: expected true or false", "invalid_request_error",
                         "invalid_value");
    add_special = j["add_special"].get<bool>();
  }
  if (j.contains("parse_special")) {
    if (!j["parse_special"].is_boolean())
      return reply_error(res, 400, "parse_special: expected true or false", "invalid_request_error",
                         "invalid_value");
    parse_special = j["parse_special"].get<bool>();
  }
  auto toks = st.engine->tokenize(j[field].get<std::string>(), add_special, parse_special);
  reply_json(res, 200, json{{"tokens", toks}});
}

void handle_detokenize(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  if (!require_engine(st, res)) return;
  json j;
  if (!object_body(req, res, &j)) return;
  if (!j.contains("tokens") || !j["tokens"].is_array())
    return reply_error(res, 400, "tokens: expected an array of token ids", "invalid_request_error",
                       "invalid_value");
  std::vector<int32_t> toks;
  const int64_t n_vocab = st.engine->n_vocab();
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
      return reply_error(res, 400,
                         "tokens: every id must be an integer in [0, " + std::to_string(n_vocab) + ")",
                         "invalid_request_error", "invalid_value");
    toks.push_back(int32_t(t.get<int64_t>()));
  }
  reply_json(res, 200, json{{"content", st.engine->detokenize(toks)}});
}

}  // namespace

void register_misc_routes(httplib::Server& svr, ServerState& st) {
  add_route(svr, st, "GET", "/live", [](const httplib::Request&, httplib::Response& res) {
    reply_json(res, 200, json{{"status", "alive"}});
  });
  add_route(svr, st, "GET", "/health", [&st](const httplib::Request&, httplib::Response& res) {
    if (!st.ready.load(std::memory_order_acquire)) return reply_json(res, 503, json{{"status", "loading"}});
    // Draining first: the engine reports unhealthy while it drains, which is not a failure.
    if (st.draining.load()) return reply_json(res, 503, json{{"status", "shutting_down"}});
    if (!st.engine->healthy())
      return reply_json(res, 503, json{{"status", "error"}, {"message", "the engine loop stopped"}});
    reply_json(res, 200, json{{"status", "ok"}});
  });
  add_route(svr, st, "GET", "/metrics", [&st](const httplib::Request&, httplib::Response& res) {
    std::string text;
    if (st.ready.load(std::memory_order_acquire)) {
      EngineStats s = st.engine->stats();
      text = st.metrics.scrape(&s);
    } else {
      text = st.metrics.scrape(nullptr);
    }
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  add_route(svr, st, "GET", "/v1/models", [&st](const httplib::Request&, httplib::Response& res) {
    if (!require_engine(st, res)) return;
    reply_json(res, 200, json{{"object", "list"}, {"data", json::array({model_json(st)})}});
  });
  // OpenAI's "retrieve model": the served model by its id, 404 for any other.
  add_route(svr, st, "GET", R"(/v1/models/(.+))", [&st](const httplib::Request& req, httplib::Response& res) {
    if (!require_engine(st, res)) return;
    const std::string id = req.matches[1];
    if (id != st.model_id)
      return reply_error(res, 404, "model '" + id + "' is not served here (GET /v1/models lists it)",
                         "invalid_request_error", "model_not_found");
    reply_json(res, 200, model_json(st));
  });
  add_route(svr, st, "POST", "/tokenize",
            [&st](const httplib::Request& req, httplib::Response& res) { handle_tokenize(st, req, res); });
  add_route(svr, st, "POST", "/detokenize",
            [&st](const httplib::Request& req, httplib::Response& res) { handle_detokenize(st, req, res); });
}

}  // namespace kvserve::server
