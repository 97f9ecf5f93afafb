#include "server/http_server.h"

#include <malloc.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>  // sigabbrev_np
#include <ctime>
#include <memory>
#include <thread>

#include "kernels/vec_dot.h"
#include "server/access_control.h"
#include "server/access_log.h"
#include "server/server_state.h"
#include "util/log.h"

namespace kvserve::server {
namespace {

// Pending connections the kernel queues for accept() (see run_server).
constexpr int kListenBacklog = 1024;

using namespace std::chrono_literals;

EngineConfig engine_config(const ServerConfig& c) {
  EngineConfig e;
  e.model_path = c.model;
  e.kv_type = c.kv_type;
  e.kv_type_k = c.kv_type_k;
  e.kv_type_v = c.kv_type_v;
  e.block_size = c.block_size;
  e.kv_memory = c.kv_memory;
  e.ctx = c.ctx;
  e.use_cache = !c.no_cache;
  e.max_seqs = c.max_seqs;
  e.max_batched_tokens = c.max_batched_tokens;
  e.max_queue = c.max_queue;
  e.threads = c.threads;
  e.prefix_cache = c.prefix_cache;
  e.context_overflow = c.context_overflow;
  e.n_keep = c.n_keep;
  e.attention_window = c.attention_window;
  e.cache_pin_fraction = c.cache_pin_fraction;
  return e;
}

// Why a request's Content-Length header cannot frame its body (RFC 9112, section 6.3: decimal
// digits, every copy the same value); empty when it can. 20 digits and more are refused too:
// httplib reads them with strtoull, which wraps a negative or saturates a too-long number.
std::string content_length_problem(const httplib::Request& req) {
  const auto [first, last] = req.headers.equal_range("Content-Length");
  const std::string& text = first->second;
  for (auto it = first; it != last; ++it)
    if (it->second != text) return "the request states two different lengths";
  if (text.empty() || text.size() > 19 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::string problem = "'";
    problem.append(text, 0, 32).append("' is not a byte count");
    return problem;
  }
  return "";
}

// Why the body of `req` (a method that may carry one or not) cannot be framed; empty when it can.
std::string framing_problem(const httplib::Request& req, bool may_have_body) {
  const bool chunked = req.has_header("Transfer-Encoding");
  const bool sized = !chunked && req.has_header("Content-Length");
  if (sized) {
    const std::string problem = content_length_problem(req);
    if (!problem.empty()) return "Content-Length: " + problem;
  }
  const bool has_body = chunked || (sized && req.get_header_value("Content-Length").find_first_not_of('0') !=
                                                 std::string::npos);
  if (has_body && !may_have_body) return req.method + " requests take no body";
  return "";
}

// Answers `res` with an error and has httplib close the connection once it is written: a sized
// content provider that reports failure after writing the whole body ends httplib's keep-alive
// loop for that socket (0.11 has no other way for a handler to close it). For requests whose
// framing is lost: what follows on the connection cannot be read as a next request.
void reply_and_close(httplib::Response& res, int status, const std::string& message,
                     const std::string& code) {
  reply_error(res, status, message, "invalid_request_error", code);
  auto body = std::make_shared<std::string>(std::move(res.body));
  res.body.clear();
  res.set_header("Connection", "close");
  res.set_content_provider(body->size(), "application/json",
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
                             return false;
                           });
}

// Where the pre-routing handler sends a request that lacks the API key, and the header that
// keeps the path it asked for (for the access log and the metrics).
constexpr const char* kUnauthorizedRoute = "/_kvserve/unauthorized";
constexpr const char* kOriginalPathHeader = "X-Kvserve-Requested-Path";

// The path the client asked for.
const std::string& requested_path(const httplib::Request& req) {
  const auto it = req.headers.find(kOriginalPathHeader);
  return it != req.headers.end() ? it->second : req.path;
}

// Hands memory that handler threads freed back to the system once the server has been quiet
// (no generation request in flight, no response written) for 2 s after answering something.
// glibc keeps freed memory in each thread's arena (and, after a large block is freed, serves
// later large ones from the arenas rather than from mmap), so a burst of large requests left an
// idle server ~60-150 MB resident for a 1 MB model; malloc_trim returns the arenas' free pages.
// Called from the main thread's 100 ms signal-wait loop.
class IdleTrim {
 public:
  void tick(bool none_in_flight, uint64_t responses) {
    if (!none_in_flight || responses != last_seen_) {
      last_seen_ = responses;
      quiet_ticks_ = 0;
      return;
    }
    if (++quiet_ticks_ < kQuietTicks || responses == trimmed_at_) return;
    malloc_trim(0);
    trimmed_at_ = responses;
  }

 private:
  static constexpr int kQuietTicks = 20;  // 2 s of 100 ms ticks
  int quiet_ticks_ = 0;
  uint64_t last_seen_ = 0;   // the response count at the previous tick
  uint64_t trimmed_at_ = 0;  // the response count at the last trim
};

bool quiet_route(const std::string& path) { return path == "/health" || path == "/live" || path == "/metrics"; }

void configure_http(httplib::Server& svr, ServerState& st) {
  // At least one handler thread per request that may be running or queued, plus a few for
  // health checks and scrapes, so that a full queue is answered with 429 rather than stalling;
  // and at least kMinHttpThreads, because httplib holds a connection's thread while it idles
  // between keep-alive requests (up to 5 s): with 84 threads, 100 pooled client connections
  // sending one short request each took 5.0 s, the last 16 waiting for idle ones to time out.
  constexpr int kMinHttpThreads = 256, kMaxDefaultHttpThreads = 1024;
  int threads = st.cfg.http_threads > 0
                    ? st.cfg.http_threads
                    : std::min(std::max(st.cfg.max_seqs + st.cfg.max_queue + 4, kMinHttpThreads),
                               kMaxDefaultHttpThreads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  svr.set_payload_max_length(st.cfg.max_body_bytes);
  svr.set_read_timeout(30, 0);
  svr.set_write_timeout(30, 0);
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    reply_error(res, 500, "internal error", "server_error");
  });
  // Fixes to how the cpp-httplib Debian ships (0.11) reads a request body, made in the
  // pre-routing handler, which runs before that read. (The Request is a non-const local of
  // httplib's request loop; the casts only edit headers and the path before anything reads them.)
  // - A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112, section
  //   6.3), but httplib reads such a POST, PUT, PATCH or DELETE until the client closes or the
  //   read timeout passes, then answers 400: `curl -X POST .../cache/flush` hung 30 s and failed.
  //   The empty body is stated.
  // - httplib parses an application/x-www-form-urlencoded body as a form and answers 413 when it
  //   is over 8 KiB (CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, compiled into the library),
  //   and that is the Content-Type `curl -d` sends: a prompt of ~2,000 tokens posted the way the
  //   README does got 413. Every body here is JSON whatever its Content-Type says (docs/api.md).
  // - A Content-Length that is not a byte count (`-5`, 20 digits) was read as a huge length: the
  //   handler thread waited out the read timeout (30 s) for bytes that never came, then answered
  //   413. Such a message cannot be framed: 400 at once, and the connection is closed (RFC 9112,
  //   section 6.3); two different lengths likewise. So is a body on a GET, HEAD or OPTIONS, which
  //   httplib would not read and would take for the next request. (A valid length over
  //   max_body_bytes is left to httplib, which reads and drops that many bytes, then answers 413.)
  // Who may call (server/access_control.h): a browser's CORS preflight is answered here; a
  // request without the API key is sent to an internal route that answers 401, after httplib has
  // read its body as for any request. (Answered here, the body stayed unread on the connection
  // and was parsed as the next request: a phantom 400 or 414 in the metrics and, behind a proxy
  // that reuses connections, an answer out of step with the requests.)
  svr.set_pre_routing_handler([&st](const httplib::Request& req, httplib::Response& res) {
    auto& mreq = const_cast<httplib::Request&>(req);
    mreq.headers.erase(kOriginalPathHeader);  // only this handler sets it
    const bool may_have_body =
        req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE";
    const std::string framing = framing_problem(req, may_have_body);
    if (!framing.empty()) {
      reply_and_close(res, 400, framing, "bad_request");
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string origin = req.get_header_value("Origin");
    const std::string allow = allowed_origin(st.cfg.cors_origins, origin);
    if (!allow.empty()) {
      res.set_header("Access-Control-Allow-Origin", allow);
      res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
      if (req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method")) {
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", req.has_header("Access-Control-Request-Headers")
                                                            ? req.get_header_value("Access-Control-Request-Headers")
                                                            : "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (!st.api_key.empty() && route_needs_key(req.path) &&
        !bearer_matches(req.get_header_value("Authorization"), st.api_key)) {
      mreq.headers.emplace(kOriginalPathHeader, req.path);
      mreq.path = kUnauthorizedRoute;
    }
    if (may_have_body) {
      if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding"))
        mreq.headers.emplace("Content-Length", "0");
      if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
        mreq.headers.erase("Content-Type");
        mreq.headers.emplace("Content-Type", "application/json");
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // The 401 of a request without the API key (the pre-routing handler sends it here), whatever
  // its method.
  const auto unauthorized = [&st](const httplib::Request& req, httplib::Response& res) {
    if (!req.has_header(kOriginalPathHeader))  // asked for by name: not a route of the API
      return reply_error(res, 404, "no such route", "invalid_request_error", "not_found");
    st.metrics.count_rejected("unauthorized");
    res.set_header("WWW-Authenticate", "Bearer");
    const bool sent = req.has_header("Authorization");
    reply_error(res, 401, sent ? "invalid API key" : "missing API key: send Authorization: Bearer KEY",
                "invalid_request_error", "invalid_api_key");
  };
  svr.Get(kUnauthorizedRoute, unauthorized);
  svr.Post(kUnauthorizedRoute, unauthorized);
  svr.Put(kUnauthorizedRoute, unauthorized);
  svr.Patch(kUnauthorizedRoute, unauthorized);
  svr.Delete(kUnauthorizedRoute, unauthorized);
  svr.Options(kUnauthorizedRoute, unauthorized);
  // Responses httplib produces itself (400 for a malformed request, 404, 413 over the payload
  // limit, 414 for a URI over 8 KiB) get a JSON body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&st](const httplib::Request& req,
                                                                   httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_ || res.is_chunked_content_provider_)
      return httplib::Server::HandlerResponse::Unhandled;
    // httplib answers 404 for a known path asked with a method it was not registered for.
    const auto known = res.status == 404 ? st.route_methods.find(req.path) : st.route_methods.end();
    if (known != st.route_methods.end()) {
      res.set_header("Allow", known->second);
      reply_error(res, 405,
                  req.method + " " + req.path + ": method not allowed (allowed: " + known->second + ")",
                  "invalid_request_error", "method_not_allowed");
    } else if (res.status == 413) {
      st.metrics.count_rejected("too_large");
      reply_error(res, 413, "body: exceeds the limit of " + std::to_string(st.cfg.max_body_bytes) + " bytes",
                  "invalid_request_error", "too_large");
    } else if (res.status == 404) {
      reply_error(res, 404, "no such route", "invalid_request_error", "not_found");
    } else if (res.status == 400 || res.status == 414) {
      // A request line or headers httplib could not parse, a URI over its limit (whose body, if
      // any, it leaves unread), or a body it could not read: the connection is out of step.
      reply_and_close(res, res.status, res.status == 400 ? "malformed HTTP request" : "request URI too long",
                      res.status == 400 ? "bad_request" : "uri_too_long");
    } else {
      reply_error(res, res.status, "request failed", "invalid_request_error", "");
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  // Runs after every response: counts it, and writes the access line for the routes that do
  // not log themselves (generation handlers set X-Request-Id and log with token figures).
  svr.set_logger([&st](const httplib::Request& req, const httplib::Response& res) {
    st.metrics.count_response(res.status);
    st.responses.fetch_add(1, std::memory_order_relaxed);
    if (res.has_header("X-Request-Id")) return;
    if (quiet_route(requested_path(req)) && log_level() > LogLevel::kDebug) return;
    AccessLogEntry e;
    e.method = req.method;
    e.route = requested_path(req);
    e.status = res.status;
    write_access_log(e, st.json_logs);
  });
  register_generate_routes(svr, st);
  register_misc_routes(svr, st);
  register_cache_routes(svr, st);
}

}  // namespace

int run_server(const ServerConfig& cfg) {
  // Signals are taken synchronously by sigtimedwait below; blocking them before any thread
  // starts makes every thread inherit the mask, so no handler runs on a random thread.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  // SIGHUP's default action kills the process on the spot (a closed terminal, or an operator
  // expecting a reload): it drains like SIGTERM instead. There is no reload.
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // A client that disconnects mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);

  auto st = std::make_unique<ServerState>();
  st->cfg = cfg;
  st->limits.max_tokens_limit = cfg.max_tokens_limit;
  st->limits.truncate_prompt = cfg.context_overflow == "truncate";
  st->limits.shift_context = cfg.context_overflow == "shift";
  st->json_logs = cfg.log_format == "json";
  st->started_unix = int64_t(std::time(nullptr));
  auto key = resolve_api_key(cfg.api_key, cfg.api_key_file);
  if (!key.ok()) {
    std::fprintf(stderr, "error: %s\n", key.status().message().c_str());
    return 2;
  }
  st->api_key = *key;
  const bool loopback = cfg.host == "127.0.0.1" || cfg.host == "localhost" || cfg.host == "::1";
  if (st->api_key.empty() && !loopback)
    KVS_WARN("listening on " + cfg.host + " without an API key: anyone who reaches the port can generate and "
             "flush the cache (set api_key or api_key_file)");

  // The listening socket, recorded as httplib creates it; declared before the server, whose
  // socket-options callback refers to it. SO_REUSEADDR (a restart may bind while the old
  // process's connections sit in TIME_WAIT) and not httplib's default SO_REUSEPORT, with which a
  // second server started on a busy port bound it too and the kernel split new connections
  // between the two processes: it must fail with "cannot listen" instead.
  int listen_fd = -1;
  httplib::Server svr;
  configure_http(svr, *st);
  svr.set_socket_options([&listen_fd](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = sock;
  });
  // Bind before loading so that /health answers "loading" while the model maps in.
  int port = cfg.port;
  if (port == 0) {
    port = svr.bind_to_any_port(cfg.host);
    if (port < 0) port = 0;
  } else if (!svr.bind_to_port(cfg.host, port)) {
    port = 0;
  }
  if (port == 0) {
    std::fprintf(stderr, "error: cannot listen on %s:%d (port in use or address not available)\n", cfg.host.c_str(), cfg.port);
    return 1;
  }
  // httplib listens with an accept backlog of 5, compiled into Debian's shared libcpp-httplib (a
  // CPPHTTPLIB_LISTEN_BACKLOG define here cannot change it): a burst of clients connecting while
  // the accept thread is busy overflowed that queue and the overflowed connections were later
  // reset. Linux lets listen() on a listening socket set a new backlog (capped by somaxconn).
  if (listen_fd >= 0 && ::listen(listen_fd, kListenBacklog) != 0)
    std::fprintf(stderr, "warning: could not raise the listen backlog to %d\n", kListenBacklog);
  std::thread listener([&svr] { svr.listen_after_bind(); });
  // An IPv6 literal goes in brackets (RFC 3986), or the printed URL is not one curl accepts.
  const std::string base_url = "http://" +
                               (cfg.host.find(':') != std::string::npos ? "[" + cfg.host + "]" : cfg.host) +
                               ":" + std::to_string(port);
  std::printf("kvserve: listening on %s (loading %s)\n", base_url.c_str(), cfg.model.c_str());
  std::fflush(stdout);

  std::atomic<int> load_state{0};  // 0 loading, 1 ready, -1 failed
  std::string load_error;
  std::thread loader([&] {
    auto e = Engine::create(engine_config(cfg));
    if (!e.ok()) {
      load_error = e.status().message();
      load_state.store(-1);
      return;
    }
    st->engine = std::move(e).value();
    st->model_id = cfg.served_model_name.empty() ? st->engine->model_name() : cfg.served_model_name;
    const std::string tmpl = st->engine->chat_template();
    if (cfg.chat_template.empty() || cfg.chat_template == "auto") {
      st->chat_family = detect_chat_family(tmpl);
    } else {
      parse_chat_family(cfg.chat_template, &st->chat_family);  // validated by the config
    }
    // Announce before /health turns 200, so whoever waited for health sees the lines.
    std::printf("kvserve: ready: model %s, context %lld tokens, chat template %s, kernels %s\n",
                st->model_id.c_str(), (long long)st->engine->context_length(),
                chat_family_name(st->chat_family), active_kernels().name);
    std::printf("curl -s %s/generate -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":64}'\n",
                base_url.c_str());
    std::fflush(stdout);
    st->ready.store(true, std::memory_order_release);
    load_state.store(1);
  });

  int exit_code = 0;
  timespec tick{0, 100 * 1000 * 1000};
  IdleTrim idle_trim;
  for (;;) {
    idle_trim.tick(st->in_flight.load() == 0, st->responses.load(std::memory_order_relaxed));
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      KVS_INFO(std::string("received SIG") + sigabbrev_np(sig) + ", draining");
      break;
    }
    if (load_state.load() == -1) {
      std::fprintf(stderr, "error: %s\n", load_error.c_str());
      exit_code = 1;
      break;
    }
  }

  // Graceful shutdown: refuse new work, let the engine finish what runs until the deadline
  // (it cancels the rest), give handlers a moment to write their last bytes, then close.
  st->draining.store(true);
  loader.join();
  auto deadline = std::chrono::milliseconds(int64_t(cfg.shutdown_timeout * 1000));
  if (st->engine) st->engine->shutdown(deadline);
  for (int i = 0; i < 50 && st->in_flight.load() > 0; ++i) std::this_thread::sleep_for(100ms);
  svr.stop();
  listener.join();
  if (st->engine) st->engine.reset();
  if (exit_code == 0) KVS_INFO("shut down cleanly");
  return exit_code;
}

}  // namespace kvserve::server
