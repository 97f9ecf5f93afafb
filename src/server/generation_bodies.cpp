// The JSON of generation answers: /generate's own shape, OpenAI's completion and chat shapes,
// whole or as stream chunks, with n choices.
#include <algorithm>
#include <cmath>
#include <limits>

#include "server/generation_job.h"

namespace kvserve::server {
namespace {

PieceFn piece_fn(const Engine* e) {
  return [e](int32_t id) { return e->token_to_piece(id); };
}

json usage_of(const RequestResult& r) {
  return usage_json(Usage{r.prompt_tokens, r.generated_tokens, r.cached_tokens});
}

// Milliseconds rounded to the microsecond: finer digits are clock noise.
double ms_of(double seconds) { return std::round(seconds * 1e6) / 1e3; }

json timings_of(const RequestResult& r) {
  return json{{"queue_ms", ms_of(r.queue_seconds)},
              {"ttft_ms", ms_of(r.ttft_seconds)},
              {"total_ms", ms_of(r.total_seconds)}};
}

// An echoed prompt's logprob entries: the first token's (null: nothing before it) unless it is the
// BOS the server added, then the engine's scores of the others.
std::vector<TokenLogprob> echo_entries(const Job& job, const Choice& c) {
  const std::vector<TokenLogprob>& scores = job.choices[c.prompt_first].prompt_logprobs;
  std::vector<TokenLogprob> out;
  if (!c.first_token_scored && !c.prompt.empty()) {
    TokenLogprob first;
    first.token = c.prompt[0];
    first.logprob = std::numeric_limits<float>::quiet_NaN();
    out.push_back(first);
  }
  out.insert(out.end(), scores.begin(), scores.end());
  return out;
}

const char* object_name(Route route, bool chunk) {
  if (route == Route::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

}  // namespace

void collect_delta(Choice& c, StreamDelta& d) {
  for (auto& lp : d.logprobs) c.logprobs.push_back(std::move(lp));
  if (!d.prompt_logprobs.empty()) c.prompt_logprobs = std::move(d.prompt_logprobs);
}

RequestResult combined_result(const Job& job, const std::vector<RequestResult>& results) {
  RequestResult all = results.front();
  for (size_t i = 1; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    if (job.choices[i].prompt_first == i) {
      all.prompt_tokens += r.prompt_tokens;
      all.cached_tokens += r.cached_tokens;
    }
    all.generated_tokens += r.generated_tokens;
    all.preemptions += r.preemptions;
    all.context_shifts += r.context_shifts;
    all.queue_seconds = std::min(all.queue_seconds, r.queue_seconds);
    all.ttft_seconds = std::min(all.ttft_seconds, r.ttft_seconds);
    all.total_seconds = std::max(all.total_seconds, r.total_seconds);
    if (all.error.empty() && !r.error.empty()) all.error = r.error;
  }
  return all;
}

json full_body(const Job& job, const std::vector<RequestResult>& results) {
  const Engine* eng = job.st->engine.get();
  const RequestResult all = combined_result(job, results);
  if (job.route == Route::kGenerate) {  // n is 1 here
    const RequestResult& r = results.front();
    json j = {{"id", job.id},
              {"text", r.text},
              {"tokens", r.generated_tokens},
              {"finish_reason", openai_finish_reason(r.finish_reason)},
              {"usage", usage_of(r)},
              {"timings", timings_of(r)}};
    if (job.api.logprobs)
      j["logprobs"] = completion_logprobs_json(job.choices.front().logprobs, piece_fn(eng));
    return j;
  }
  json choices = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    const Choice& c = job.choices[i];
    json choice = {
        {"index", i}, {"finish_reason", openai_finish_reason(r.finish_reason)}, {"logprobs", nullptr}};
    if (job.route == Route::kCompletion) {
      choice["text"] = c.echo_text + r.text;
      if (job.api.logprobs) {
        std::vector<TokenLogprob> lps = job.api.echo ? echo_entries(job, c) : std::vector<TokenLogprob>{};
        json prompt_part = completion_logprobs_json(lps, piece_fn(eng));
        json gen_part = completion_logprobs_json(c.logprobs, piece_fn(eng), int64_t(c.echo_text.size()));
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (auto& v : gen_part[k]) prompt_part[k].push_back(std::move(v));
        choice["logprobs"] = prompt_part;
      }
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
      if (job.api.logprobs) choice["logprobs"] = chat_logprobs_json(c.logprobs, piece_fn(eng));
    }
    choices.push_back(std::move(choice));
  }
  return json{{"id", job.id},
              {"object", object_name(job.route, false)},
              {"created", job.created},
              {"model", job.st->model_id},
              {"choices", choices},
              {"usage", usage_of(all)},
              {"timings", timings_of(all)}};
}

json chunk_body(Job& job, size_t i, const std::string& text, const std::vector<TokenLogprob>& lps,
                const std::string& finish) {
  const Engine* eng = job.st->engine.get();
  Choice& c = job.choices[i];
  json fin = finish.empty() ? json(nullptr) : json(finish);
  if (job.route == Route::kGenerate) {
    json j = {{"id", job.id}, {"text", text}, {"finish_reason", fin}};
    if (job.api.logprobs && !lps.empty())
      j["logprobs"] = completion_logprobs_json(lps, piece_fn(eng), c.text_offset);
    return j;
  }
  json choice = {{"index", i}, {"finish_reason", fin}, {"logprobs", nullptr}};
  if (job.route == Route::kCompletion) {
    choice["text"] = text;
    if (job.api.logprobs && !lps.empty())
      choice["logprobs"] = completion_logprobs_json(lps, piece_fn(eng), c.text_offset);
  } else {
    json delta = json::object();
    if (!c.sent_role) {
      delta["role"] = "assistant";
      c.sent_role = true;
    }
    if (finish.empty()) delta["content"] = text;
    choice["delta"] = delta;
    if (job.api.logprobs && !lps.empty()) choice["logprobs"] = chat_logprobs_json(lps, piece_fn(eng));
  }
  json j = {{"id", job.id},
            {"object", object_name(job.route, true)},
            {"created", job.created},
            {"model", job.st->model_id},
            {"choices", json::array({choice})}};
  if (job.api.include_usage) j["usage"] = nullptr;  // OpenAI: null on all but the usage chunk
  return j;
}

json last_chunk(Job& job, size_t i, const RequestResult& r) {
  json last = chunk_body(job, i, "", {}, openai_finish_reason(r.finish_reason));
  if (job.route == Route::kGenerate) {
    last["usage"] = usage_of(r);
    last["timings"] = timings_of(r);
    last["tokens"] = r.generated_tokens;
  }
  if (r.finish_reason == "error") last["error"] = error_json(r.error, "server_error")["error"];
  return last;
}

std::string stream_tail(const Job& job, const RequestResult& combined) {
  std::string out;
  if (job.api.include_usage && job.route != Route::kGenerate) {
    json u = {{"id", job.id},
              {"object", object_name(job.route, true)},
              {"created", job.created},
              {"model", job.st->model_id},
              {"choices", json::array()},
              {"usage", usage_of(combined)}};
    out += sse_data(u);
  }
  return out + sse_done();
}

json echo_chunk(Job& job, size_t i) {
  Choice& c = job.choices[i];
  c.echo_sent = true;
  json j = chunk_body(job, i, c.echo_text, echo_entries(job, c), "");
  c.text_offset += int64_t(c.echo_text.size());
  return j;
}

}  // namespace kvserve::server
