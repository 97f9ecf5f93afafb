// POST /generate, /v1/completions, /v1/chat/completions: validate → template → tokenize →
// submit → answer at once (JSON) or stream (SSE).
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <memory>

#include "server/access_log.h"
#include "server/api_response.h"
#include "server/peer_watch.h"
#include "server/server_state.h"

namespace kvserve::server {
namespace {

using namespace std::chrono_literals;

const char* route_path(Route r) {
  switch (r) {
    case Route::kCompletion: return "/v1/completions";
    case Route::kChat: return "/v1/chat/completions";
    default: return "/generate";
  }
}

// Everything one generation request carries from submission to its last byte.
struct Job {
  ServerState* st = nullptr;
  Route route = Route::kGenerate;
  ApiRequest api;
  std::shared_ptr<RequestHandle> handle;
  std::string id;  // "cmpl-7" / "chatcmpl-7" / "7"
  uint64_t server_id = 0;
  int64_t created = 0;
  std::vector<TokenLogprob> logprobs;  // collected for non-streamed answers
  int64_t text_offset = 0;             // characters streamed so far (completion logprobs)
  // echo: the prompt text the answer starts with, and its logprob entries once the engine has
  // scored it (a null entry first when the prompt's first token is the client's own).
  std::string echo_text;
  std::vector<int32_t> prompt;
  bool first_token_scored = false;  // the first prompt token is a BOS the server added
  std::vector<TokenLogprob> prompt_logprobs;
  bool echo_sent = false;
  bool sent_role = false;
  bool done = false;
  bool logged = false;
  std::unique_ptr<InFlight> in_flight;
};

// The loop thread has exited (failed, or shut down) and will finish nothing more. Not
// Engine::healthy(): that also turns false while a SIGTERM drain lets requests finish, and
// those must not be cut off.
bool engine_loop_dead(const Engine& e) { return !e.stats().loop_alive; }

PieceFn piece_fn(const Engine* e) {
  return [e](int32_t id) { return e->token_to_piece(id); };
}

json usage_of(const RequestResult& r) { return usage_json(Usage{r.prompt_tokens, r.generated_tokens, r.cached_tokens}); }

// Milliseconds rounded to the microsecond: finer digits are clock noise.
double ms_of(double seconds) { return std::round(seconds * 1e6) / 1e3; }

json timings_of(const RequestResult& r) {
  return json{{"queue_ms", ms_of(r.queue_seconds)}, {"ttft_ms", ms_of(r.ttft_seconds)}, {"total_ms", ms_of(r.total_seconds)}};
}

void log_job(Job& job, int status, const RequestResult& r) {
  if (job.logged) return;
  job.logged = true;
  AccessLogEntry e;
  e.id = job.server_id;
  e.method = "POST";
  e.route = route_path(job.route);
  e.status = status;
  e.prompt_tokens = r.prompt_tokens;
  e.cached_tokens = r.cached_tokens;
  e.generated_tokens = r.generated_tokens;
  e.context_shifts = r.context_shifts;
  e.queue_ms = r.queue_seconds * 1e3;
  e.ttft_ms = r.ttft_seconds * 1e3;
  e.total_ms = r.total_seconds * 1e3;
  e.finish_reason = r.finish_reason;
  e.error = r.error;
  write_access_log(e, job.st->json_logs);
}

void log_rejection(ServerState& st, uint64_t id, Route route, int status, const std::string& why) {
  AccessLogEntry e;
  e.id = id;
  e.method = "POST";
  e.route = route_path(route);
  e.status = status;
  e.error = why;
  write_access_log(e, st.json_logs);
}

// An echoed prompt's logprob entries: the first token's (null: nothing before it) unless it is the
// BOS the server added, then the engine's scores of the others.
std::vector<TokenLogprob> echo_entries(const Job& job) {
  std::vector<TokenLogprob> out;
  if (!job.first_token_scored && !job.prompt.empty()) {
    TokenLogprob first;
    first.token = job.prompt[0];
    first.logprob = std::numeric_limits<float>::quiet_NaN();
    out.push_back(first);
  }
  out.insert(out.end(), job.prompt_logprobs.begin(), job.prompt_logprobs.end());
  return out;
}

// The full (non-streamed) answer body.
json full_body(const Job& job, const RequestResult& r) {
  const Engine* eng = job.st->engine.get();
  std::string finish = openai_finish_reason(r.finish_reason);
  if (job.route == Route::kGenerate) {
    json j = {{"id", job.id},
              {"text", r.text},
              {"tokens", r.generated_tokens},
              {"finish_reason", finish},
              {"usage", usage_of(r)},
              {"timings", timings_of(r)}};
    if (job.api.logprobs) j["logprobs"] = completion_logprobs_json(job.logprobs, piece_fn(eng));
    return j;
  }
  json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
  if (job.route == Route::kCompletion) {
    choice["text"] = job.echo_text + r.text;
    if (job.api.logprobs) {
      std::vector<TokenLogprob> lps = job.api.echo ? echo_entries(job) : std::vector<TokenLogprob>{};
      json prompt_part = completion_logprobs_json(lps, piece_fn(eng));
      json gen_part = completion_logprobs_json(job.logprobs, piece_fn(eng), int64_t(job.echo_text.size()));
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (auto& v : gen_part[k]) prompt_part[k].push_back(std::move(v));
      choice["logprobs"] = prompt_part;
    }
  } else {
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    if (job.api.logprobs) choice["logprobs"] = chat_logprobs_json(job.logprobs, piece_fn(eng));
  }
  return json{{"id", job.id},
              {"object", job.route == Route::kChat ? "chat.completion" : "text_completion"},
              {"created", job.created},
              {"model", eng->model_name()},
              {"choices", json::array({choice})},
              {"usage", usage_of(r)},
              {"timings", timings_of(r)}};
}

// One streamed chunk carrying `text` (and its logprobs); `finish` non-empty on the last.
json chunk_body(Job& job, const std::string& text, const std::vector<TokenLogprob>& lps, const std::string& finish) {
  const Engine* eng = job.st->engine.get();
  json fin = finish.empty() ? json(nullptr) : json(finish);
  if (job.route == Route::kGenerate) {
    json j = {{"id", job.id}, {"text", text}, {"finish_reason", fin}};
    if (job.api.logprobs && !lps.empty()) j["logprobs"] = completion_logprobs_json(lps, piece_fn(eng), job.text_offset);
    return j;
  }
  json choice = {{"index", 0}, {"finish_reason", fin}, {"logprobs", nullptr}};
  if (job.route == Route::kCompletion) {
    choice["text"] = text;
    if (job.api.logprobs && !lps.empty()) choice["logprobs"] = completion_logprobs_json(lps, piece_fn(eng), job.text_offset);
  } else {
    json delta = json::object();
    if (!job.sent_role) {
      delta["role"] = "assistant";
      job.sent_role = true;
    }
    if (finish.empty()) delta["content"] = text;
    choice["delta"] = delta;
    if (job.api.logprobs && !lps.empty()) choice["logprobs"] = chat_logprobs_json(lps, piece_fn(eng));
  }
  json j = {{"id", job.id},
            {"object", job.route == Route::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", job.created},
            {"model", eng->model_name()},
            {"choices", json::array({choice})}};
  if (job.api.include_usage) j["usage"] = nullptr;  // OpenAI: null on all but the usage chunk
  return j;
}

// The closing events: final chunk, optional usage chunk, [DONE].
std::string closing_events(Job& job, const RequestResult& r) {
  std::string out;
  std::string finish = openai_finish_reason(r.finish_reason);
  json last = chunk_body(job, "", {}, finish);
  if (job.route == Route::kGenerate) {
    last["usage"] = usage_of(r);
    last["timings"] = timings_of(r);
    last["tokens"] = r.generated_tokens;
  }
  if (r.finish_reason == "error") last["error"] = error_json(r.error, "server_error")["error"];
  out += sse_data(last);
  if (job.api.include_usage && job.route != Route::kGenerate) {
    json u = {{"id", job.id},
              {"object", job.route == Route::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", job.created},
              {"model", job.st->engine->model_name()},
              {"choices", json::array()},
              {"usage", usage_of(r)}};
    out += sse_data(u);
  }
  return out + sse_done();
}

// Streams the echoed prompt as one chunk (its logprob entries with it when asked); false when
// the client is gone (the request is then cancelled).
bool send_echo(Job& job, httplib::DataSink& sink) {
  job.echo_sent = true;
  std::string ev = sse_data(chunk_body(job, job.echo_text, echo_entries(job), ""));
  job.text_offset += int64_t(job.echo_text.size());
  if (sink.write(ev.data(), ev.size())) return true;
  job.handle->cancel();
  return false;
}

void finish_job(Job& job, int status, const RequestResult& r) {
  if (job.done) return;
  job.done = true;
  job.st->metrics.observe_result(r);
  log_job(job, status, r);
}

}  // namespace

// Declared in server_state.h (the /cache/pin route tokenizes the same way).
Expected<std::vector<int32_t>> prompt_tokens(ServerState& st, const ApiRequest& api) {
  const Engine& e = *st.engine;
  if (!api.prompt_tokens.empty()) {
    for (int32_t t : api.prompt_tokens)
      if (t >= e.n_vocab())
        return invalid_argument("prompt: token id " + std::to_string(t) + " is outside the vocabulary (" +
                                std::to_string(e.n_vocab()) + " tokens)");
    return api.prompt_tokens;
  }
  std::vector<int32_t> toks;
  if (api.route == Route::kChat) {
    // Chat markers such as <|im_start|> are special tokens: parse them.
    toks = e.tokenize(render_chat(st.chat_family, api.messages), true, true);
  } else {
    toks = e.tokenize(api.prompt, true, false);
  }
  if (toks.empty()) return invalid_argument("prompt: encodes to no tokens");
  return toks;
}

namespace {

void handle_generation(ServerState& st, Route route, const httplib::Request& req, httplib::Response& res) {
  uint64_t sid = st.next_id.fetch_add(1);
  res.set_header("X-Request-Id", std::to_string(sid));
  if (!st.ready.load(std::memory_order_acquire)) {
    st.metrics.count_rejected("loading");
    reply_error(res, 503, "the model is still loading", "service_unavailable", "loading");
    log_rejection(st, sid, route, 503, "loading");
    return;
  }
  if (st.draining.load()) {
    st.metrics.count_rejected("shutting_down");
    reply_error(res, 503, "the server is shutting down", "service_unavailable", "shutting_down");
    log_rejection(st, sid, route, 503, "shutting_down");
    return;
  }
  if (req.body.size() > st.cfg.max_body_bytes) {
    st.metrics.count_rejected("too_large");
    reply_error(res, 413, "body: " + std::to_string(req.body.size()) + " bytes exceed the limit of " +
                              std::to_string(st.cfg.max_body_bytes) + " bytes", "invalid_request_error", "too_large");
    log_rejection(st, sid, route, 413, "too_large");
    return;
  }
  auto job = std::make_shared<Job>();
  job->in_flight = std::make_unique<InFlight>(&st);
  auto reject = [&](int status, const Status& s) {
    st.metrics.count_rejected("invalid");
    reply_error(res, status, s.message(), "invalid_request_error", "invalid_value");
    log_rejection(st, sid, route, status, s.message());
  };
  auto api = parse_api_request(req.body, route, st.limits);
  if (!api.ok()) return reject(400, api.status());
  auto toks = prompt_tokens(st, *api);
  if (!toks.ok()) return reject(400, toks.status());
  auto max_tokens = resolve_max_tokens(*api, int64_t(toks->size()), st.engine->context_length(), st.limits);
  if (!max_tokens.ok()) return reject(400, max_tokens.status());
  if (api->echo && int64_t(toks->size()) + *max_tokens > st.engine->context_length())
    return reject(
        400, invalid_argument("echo: prompt (" + std::to_string(toks->size()) + " tokens) + max_tokens (" +
                              std::to_string(*max_tokens) + ") exceed the context length (" +
                              std::to_string(st.engine->context_length()) +
                              " tokens), and an echoed prompt is not truncated"));
  if (api->echo) {
    job->echo_text = api->prompt_tokens.empty() ? api->prompt : st.engine->detokenize(*toks);
    job->prompt = *toks;
    job->first_token_scored =
        api->prompt_tokens.empty() && st.engine->bos_id() >= 0 && (*toks)[0] == st.engine->bos_id();
  }

  GenerationRequest g;
  g.prompt = std::move(*toks);
  g.params = api->params;
  g.params.max_tokens = *max_tokens;
  g.logprobs = api->logprobs;
  g.top_logprobs = api->top_logprobs;
  g.prompt_logprobs = api->echo && api->logprobs;
  g.cache_salt = api->cache_salt;
  g.timeout_seconds = st.cfg.request_timeout;
  auto handle = st.engine->submit(std::move(g));
  if (!handle.ok()) {
    const Status& s = handle.status();
    if (s.code() == StatusCode::kOutOfMemory) {
      st.metrics.count_rejected("queue_full");
      res.set_header("Retry-After", "1");
      reply_error(res, 429, "the request queue is full (" + std::to_string(st.cfg.max_queue) + " waiting); retry later",
                  "rate_limit_error", "queue_full");
      log_rejection(st, sid, route, 429, "queue_full");
    } else if (s.code() == StatusCode::kInvalidArgument) {
      reject(400, s);
    } else if (s.code() == StatusCode::kUnsupported) {
      st.metrics.count_rejected("shutting_down");
      reply_error(res, 503, s.message(), "service_unavailable", "shutting_down");
      log_rejection(st, sid, route, 503, s.message());
    } else {
      reply_error(res, 500, s.message(), "server_error");
      log_rejection(st, sid, route, 500, s.message());
    }
    return;
  }
  job->st = &st;
  job->route = route;
  job->api = std::move(*api);
  job->handle = std::move(*handle);
  job->server_id = sid;
  job->id = (route == Route::kChat ? "chatcmpl-" : route == Route::kCompletion ? "cmpl-" : "gen-") + std::to_string(sid);
  job->created = int64_t(std::time(nullptr));

  if (!job->api.stream) {
    // The answer is written only once the request has finished, so a client that gives up
    // meanwhile is noticed here, by watching its socket between waits (peer_watch.h), and
    // its request is cancelled: the engine frees the sequence within one step.
    PeerWatch peer(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    bool client_gone = false;
    StreamDelta d;
    for (;;) {
      if (peer.peer_closed()) {
        client_gone = true;
        job->handle->cancel();
        break;
      }
      if (job->handle->next(&d, 100ms)) {
        for (auto& lp : d.logprobs) job->logprobs.push_back(std::move(lp));
        if (!d.prompt_logprobs.empty()) job->prompt_logprobs = std::move(d.prompt_logprobs);
        d = StreamDelta{};
      } else if (job->handle->finished()) {
        if (!job->handle->next(&d, 0ms)) break;  // drained: the result is final
        for (auto& lp : d.logprobs) job->logprobs.push_back(std::move(lp));
        if (!d.prompt_logprobs.empty()) job->prompt_logprobs = std::move(d.prompt_logprobs);
        d = StreamDelta{};
      } else if (engine_loop_dead(*st.engine)) {
        break;  // a dead engine loop would never finish the request: do not wait forever
      }
    }
    if (client_gone) {
      // Nobody reads this answer; the status (nginx's "client closed request") is what the
      // access log and requests_total{status="499"} record. The engine finishes a cancelled
      // request at its next step; waiting for that (bounded) makes the logged figures final.
      for (int i = 0; i < 100 && !job->handle->finished(); ++i) job->handle->next(&d, 10ms);
      RequestResult r = job->handle->result();
      if (r.finish_reason.empty()) r.finish_reason = "cancelled";
      reply_error(res, 499, "the client closed the connection", "client_closed_request");
      finish_job(*job, 499, r);
      return;
    }
    if (!job->handle->finished()) {
      job->handle->cancel();
      RequestResult r = job->handle->result();
      reply_error(res, 500, "the engine loop stopped", "server_error");
      finish_job(*job, 500, r);
      return;
    }
    RequestResult r = job->handle->result();
    if (r.finish_reason == "error") {
      reply_error(res, 500, r.error.empty() ? "generation failed" : r.error, "server_error");
      finish_job(*job, 500, r);
      return;
    }
    res.set_content(dump_json(full_body(*job, r)), "application/json");
    finish_job(*job, 200, r);
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job](size_t, httplib::DataSink& sink) -> bool {
        if (job->done) {
          sink.done();
          return true;
        }
        StreamDelta d;
        bool got = job->handle->next(&d, 100ms);
        if (!got && job->handle->finished()) got = job->handle->next(&d, 0ms);
        if (got || job->handle->finished()) {
          // The echoed prompt goes first, with its scores (they come in the first delta).
          if (!d.prompt_logprobs.empty()) job->prompt_logprobs = std::move(d.prompt_logprobs);
          if (job->api.echo && !job->echo_sent && !send_echo(*job, sink)) return false;
        }
        if (got) {
          if (d.text.empty() && d.logprobs.empty()) return true;
          std::string ev = sse_data(chunk_body(*job, d.text, d.logprobs, ""));
          job->text_offset += int64_t(d.text.size());
          if (!sink.write(ev.data(), ev.size())) {
            job->handle->cancel();  // the client went away
            return false;
          }
          return true;
        }
        if (!job->handle->finished()) {
          // Nothing new yet; a closed client shows up here as not writable, and a dead
          // engine loop would never finish the request.
          if ((sink.is_writable && !sink.is_writable()) || engine_loop_dead(*job->st->engine)) {
            job->handle->cancel();
            return false;
          }
          return true;
        }
        RequestResult r = job->handle->result();
        std::string ev = closing_events(*job, r);
        bool ok = sink.write(ev.data(), ev.size());
        finish_job(*job, 200, r);
        if (ok) sink.done();
        return ok;
      },
      [job](bool success) {
        // Runs when the response ends, streamed fully or not: an unfinished request whose
        // client vanished is cancelled so its KV blocks come back within one engine step.
        if (!job->done) {
          job->handle->cancel();
          RequestResult r = job->handle->result();
          if (r.finish_reason.empty()) r.finish_reason = "cancelled";
          job->done = true;
          log_job(*job, 200, r);
        }
        job->in_flight.reset();
      });
}

}  // namespace

void register_generate_routes(httplib::Server& svr, ServerState& st) {
  for (Route r : {Route::kGenerate, Route::kCompletion, Route::kChat}) {
    add_route(svr, st, "POST", route_path(r), [&st, r](const httplib::Request& req, httplib::Response& res) {
      handle_generation(st, r, req, res);
    });
  }
}

}  // namespace kvserve::server
