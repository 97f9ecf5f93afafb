// POST /generate, /v1/completions, /v1/chat/completions: validate → template → tokenize →
// submit one engine request per choice → answer at once (JSON) or stream (SSE).
#include <chrono>
#include <ctime>
#include <memory>
#include <thread>

#include "server/access_log.h"
#include "server/generation_job.h"
#include "server/peer_watch.h"

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

// The loop thread has exited (failed, or shut down) and will finish nothing more. Not
// Engine::healthy(): that also turns false while a SIGTERM drain lets requests finish, and
// those must not be cut off.
bool engine_loop_dead(const Engine& e) { return !e.stats().loop_alive; }

// Whether a choice of the job is still open and unfinished. The loop finishes every request it
// holds before it reports itself dead (a shutdown past its drain deadline ends them "cancelled"),
// so a choice seen unfinished just before the loop died may have finished since: only one still
// unfinished after the loop's death will never be.
bool has_unfinished_choice(const Job& job) {
  for (const Choice& c : job.choices)
    if (!c.closed && !c.handle->finished()) return true;
  return false;
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

void cancel_all(Job& job) {
  for (Choice& c : job.choices) c.handle->cancel();
}

// Every choice's result; a choice that never finished (its client or the engine gone) counts as
// cancelled.
std::vector<RequestResult> results_of(const Job& job) {
  std::vector<RequestResult> rs;
  for (const Choice& c : job.choices) {
    rs.push_back(c.handle->result());
    if (rs.back().finish_reason.empty()) rs.back().finish_reason = "cancelled";
  }
  return rs;
}

void finish_job(Job& job, int status, const std::vector<RequestResult>& results) {
  if (job.done) return;
  job.done = true;
  for (const RequestResult& r : results) job.st->metrics.observe_result(r);
  log_job(job, status, combined_result(job, results));
}

}  // namespace

// Declared in server_state.h (the /cache/pin route tokenizes the same way).
Expected<std::vector<int32_t>> prompt_tokens(ServerState& st, const ApiRequest& api, size_t k) {
  const Engine& e = *st.engine;
  const std::string field = api.prompts.size() > 1 ? "prompt[" + std::to_string(k) + "]" : "prompt";
  if (api.route != Route::kChat && !api.prompts[k].tokens.empty()) {
    for (int32_t t : api.prompts[k].tokens)
      if (t >= e.n_vocab())
        return invalid_argument(field + ": token id " + std::to_string(t) + " is outside the vocabulary (" +
                                std::to_string(e.n_vocab()) + " tokens)");
    return api.prompts[k].tokens;
  }
  std::vector<int32_t> toks;
  if (api.route == Route::kChat) {
    // Chat markers such as <|im_start|> are special tokens: parse them, but only in the markup.
    const RenderedChat chat = render_chat_parts(st.chat_family, api.messages);
    toks = e.tokenize_chat(chat.text, chat.content);
  } else {
    toks = e.tokenize(api.prompts[k].text, true, false);
  }
  if (toks.empty()) return invalid_argument(field + ": encodes to no tokens");
  return toks;
}

namespace {

// Waits for every choice to finish, collecting its deltas. The answer is written only once all
// have, so a client that gives up meanwhile is noticed by watching its socket between waits
// (peer_watch.h) and every choice is cancelled: the engine frees their sequences within a step.
// Returns the HTTP status to answer with: 200, 499 (client gone) or 500 (engine loop gone).
int wait_for_choices(Job& job, const httplib::Request& req) {
  PeerWatch peer(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  StreamDelta d;
  for (;;) {
    if (peer.peer_closed()) {
      cancel_all(job);
      // Nobody reads this answer; the status (nginx's "client closed request") is what the
      // access log and requests_total{status="499"} record. The engine finishes cancelled
      // requests at its next step; waiting for that (bounded) makes the logged figures final.
      for (Choice& c : job.choices)
        for (int i = 0; i < 100 && !c.handle->finished(); ++i) c.handle->next(&d, 10ms);
      return 499;
    }
    bool all_finished = true;
    Choice* waiting = nullptr;
    for (Choice& c : job.choices) {
      // finished() before draining: a choice that finished is then drained of its last deltas.
      const bool finished = c.handle->finished();
      while (c.handle->next(&d, 0ms)) {
        collect_delta(c, d);
        d = StreamDelta{};
      }
      if (!finished) {
        all_finished = false;
        if (waiting == nullptr) waiting = &c;
      }
    }
    if (all_finished) return 200;
    if (engine_loop_dead(*job.st->engine)) {
      if (!has_unfinished_choice(job)) continue;  // finished meanwhile: the next pass collects them
      cancel_all(job);  // a dead engine loop would never finish them: do not wait forever
      return 500;
    }
    if (waiting->handle->next(&d, 100ms)) {
      collect_delta(*waiting, d);
      d = StreamDelta{};
    }
  }
}

void answer_whole(Job& job, const httplib::Request& req, httplib::Response& res) {
  const int status = wait_for_choices(job, req);
  std::vector<RequestResult> rs = results_of(job);
  if (status == 499) {
    reply_error(res, 499, "the client closed the connection", "client_closed_request");
  } else if (status == 500) {
    reply_error(res, 500, "the engine loop stopped", "server_error");
  } else {
    for (const RequestResult& r : rs)
      if (r.finish_reason == "error") {
        reply_error(res, 500, r.error.empty() ? "generation failed" : r.error, "server_error");
        return finish_job(job, 500, rs);
      }
    res.set_content(dump_json(full_body(job, rs)), "application/json");
  }
  finish_job(job, status, rs);
}

// One pass of the stream over the choices: whatever each has ready goes out as its chunks (the
// echoed prompt first), a finished choice's last chunk closes it, and once all are closed the
// tail ends the stream. One choice waits up to 100 ms for its next delta; several are polled,
// with a short sleep when none had anything. False ends the response (the client is gone).
bool stream_step(Job& job, httplib::DataSink& sink) {
  if (job.done) {
    sink.done();
    return true;
  }
  auto write = [&](const std::string& ev) {
    if (sink.write(ev.data(), ev.size())) return true;
    cancel_all(job);  // the client went away
    return false;
  };
  const auto wait = job.choices.size() == 1 ? 100ms : 0ms;
  bool progressed = false;
  for (size_t i = 0; i < job.choices.size(); ++i) {
    Choice& c = job.choices[i];
    if (c.closed) continue;
    // An echo with logprobs needs its prompt's scores, which choice 0 of the prompt brings (and
    // which come before any of its tokens): until they are in, this choice's deltas wait.
    if (job.api.echo && job.api.logprobs && !c.echo_sent && c.prompt_first != i) {
      const Choice& src = job.choices[c.prompt_first];
      if (!src.echo_sent && !src.handle->finished()) continue;
    }
    StreamDelta d;
    bool got = c.handle->next(&d, wait);
    const bool finished = c.handle->finished();
    if (!got && finished) got = c.handle->next(&d, 0ms);
    if (got || finished) {
      // The echoed prompt goes first, with its scores (they come in the first delta).
      if (!d.prompt_logprobs.empty()) c.prompt_logprobs = std::move(d.prompt_logprobs);
      if (job.api.echo && !c.echo_sent && !write(sse_data(echo_chunk(job, i)))) return false;
    }
    if (got) {
      progressed = true;
      if (d.text.empty() && d.logprobs.empty()) continue;
      std::string ev = sse_data(chunk_body(job, i, d.text, d.logprobs, ""));
      c.text_offset += int64_t(d.text.size());
      if (!write(ev)) return false;
      continue;
    }
    if (finished) {
      progressed = true;
      c.closed = true;
      if (!write(sse_data(last_chunk(job, i, c.handle->result())))) return false;
    }
  }
  bool all_closed = true;
  for (const Choice& c : job.choices) all_closed = all_closed && c.closed;
  if (all_closed) {
    std::vector<RequestResult> rs = results_of(job);
    const bool ok = write(stream_tail(job, combined_result(job, rs)));
    finish_job(job, 200, rs);
    if (ok) sink.done();
    return ok;
  }
  if (!progressed) {
    // Nothing new yet; a closed client shows up here as not writable, and a dead engine loop
    // would never finish the requests.
    if ((sink.is_writable && !sink.is_writable()) ||
        (engine_loop_dead(*job.st->engine) && has_unfinished_choice(job))) {
      cancel_all(job);
      return false;
    }
    if (job.choices.size() > 1) std::this_thread::sleep_for(5ms);
  }
  return true;
}

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
  if (!api->seed_given) api->params.seed = fresh_seed();
  const size_t num_prompts = route == Route::kChat ? 1 : api->prompts.size();
  const size_t num_choices = num_prompts * size_t(api->n);
  if (num_choices > 1 && num_choices > size_t(st.cfg.max_queue))
    return reject(400, invalid_argument("prompt: " + std::to_string(num_prompts) + " prompts x n " +
                                        std::to_string(api->n) + " = " + std::to_string(num_choices) +
                                        " requests exceed max_queue (" + std::to_string(st.cfg.max_queue) +
                                        "): split the batch"));
  // Every prompt's engine request, checked before any is submitted.
  std::vector<GenerationRequest> requests;
  for (size_t k = 0; k < num_prompts; ++k) {
    auto toks = prompt_tokens(st, *api, k);
    if (!toks.ok()) return reject(400, toks.status());
    auto max_tokens = resolve_max_tokens(*api, int64_t(toks->size()), st.engine->context_length(), st.limits);
    if (!max_tokens.ok()) return reject(400, max_tokens.status());
    if (api->echo && int64_t(toks->size()) + *max_tokens > st.engine->context_length())
      return reject(
          400, invalid_argument("echo: prompt (" + std::to_string(toks->size()) + " tokens) + max_tokens (" +
                                std::to_string(*max_tokens) + ") exceed the context length (" +
                                std::to_string(st.engine->context_length()) +
                                " tokens), and an echoed prompt is not truncated"));
    GenerationRequest g;
    g.prompt = std::move(*toks);
    g.params = api->params;
    g.params.max_tokens = *max_tokens;
    g.logprobs = api->logprobs;
    g.top_logprobs = api->top_logprobs;
    g.prompt_logprobs = api->echo && api->logprobs;
    g.cache_salt = api->cache_salt;
    g.timeout_seconds = st.cfg.request_timeout;
    requests.push_back(std::move(g));
  }
  // One engine request per choice, choice i of a prompt drawing with seed + i (a prompt's blocks
  // are shared through the prefix cache). A choice the engine refuses withdraws the others.
  for (size_t q = 0; q < num_choices; ++q) {
    const size_t k = q / size_t(api->n);
    const int i = int(q % size_t(api->n));
    Choice c;
    c.prompt_first = job->choices.size() - size_t(i);
    if (api->echo) {
      const PromptInput& in = api->prompts[k];
      c.prompt = requests[k].prompt;
      c.echo_text = in.tokens.empty() ? in.text : st.engine->detokenize(c.prompt);
      c.first_token_scored =
          in.tokens.empty() && st.engine->bos_id() >= 0 && c.prompt[0] == st.engine->bos_id();
    }
    GenerationRequest gi = requests[k];
    gi.params.seed = requests[k].params.seed + uint64_t(i);
    // Choice 0 scores the prompt for all; the others may then reuse its cached blocks.
    gi.prompt_logprobs = requests[k].prompt_logprobs && i == 0;
    auto handle = st.engine->submit(std::move(gi));
    if (handle.ok()) {
      c.handle = std::move(*handle);
      job->choices.push_back(std::move(c));
      continue;
    }
    cancel_all(*job);
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
  job->server_id = sid;
  job->id = (route == Route::kChat ? "chatcmpl-" : route == Route::kCompletion ? "cmpl-" : "gen-") + std::to_string(sid);
  job->created = int64_t(std::time(nullptr));

  if (!job->api.stream) return answer_whole(*job, req, res);

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [job](size_t, httplib::DataSink& sink) -> bool { return stream_step(*job, sink); },
      [job](bool) {
        // Runs when the response ends, streamed fully or not: unfinished choices whose client
        // vanished are cancelled so their KV blocks come back within one engine step.
        if (!job->done) {
          cancel_all(*job);
          job->done = true;
          log_job(*job, 200, combined_result(*job, results_of(*job)));
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
