#include "server/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace kvserve::loadgen {

using json = nlohmann::json;

namespace {

// A fixed vocabulary of plain words (each a single token or two for most tokenizers), so
// prompts of N words have comparable token counts across runs and machines.
constexpr const char* kWords[] = {
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book",
    "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend",
    "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "community", "name",
    "president", "team", "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others",
    "level", "office", "door", "health", "person", "art", "war", "history", "party", "result", "change",
    "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education",
    "little", "big", "small", "happy", "sunny", "green", "blue", "red", "old", "young", "good", "new",
    "first", "last", "long", "great", "own", "other", "right", "large", "high", "different", "early",
    "went", "saw", "found", "made", "played", "ran", "walked", "looked", "said", "wanted", "liked",
    "the", "a", "and", "to", "of", "in", "with", "on", "for", "at", "from", "by", "about", "into",
    "tree", "dog", "cat", "bird", "park", "ball", "toy", "sun", "flower", "garden", "river", "cake",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string make_words(uint64_t seed, uint64_t stream, int n) {
  uint64_t state = seed * 0xD1B54A32D192ED03ull ^ (stream + 1) * 0x8CB92BA72F3D8DD7ull;
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[splitmix64(&state) % kNumWords];
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * double(v.size() - 1);
  size_t lo = size_t(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

Summary summarize(std::vector<double> v) {
  Summary s;
  s.count = int64_t(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  s.p50 = percentile(v, 0.5);
  s.p99 = percentile(std::move(v), 0.99);
  return s;
}

void SseParser::feed(const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    char c = data[i];
    if (c != '\n') {
      line_ += c;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.rfind("data:", 0) == 0) {
      size_t start = line_.size() > 5 && line_[5] == ' ' ? 6 : 5;
      on_data_(line_.substr(start));
    }
    line_.clear();  // blank lines (event ends) and other fields carry nothing we use
  }
}

bool apply_event(const std::string& payload, double t, RequestSample* s) {
  if (payload == "[DONE]") return true;
  json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (s->error.empty()) s->error = "malformed event: " + payload.substr(0, 200);
    return false;
  }
  if (j.contains("error") && s->error.empty()) {
    const json& e = j["error"];
    s->error = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                  : e.dump();
  }
  if (j.contains("choices") && j["choices"].is_array()) {
    for (const json& c : j["choices"]) {
      std::string text;
      if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
          c["delta"]["content"].is_string())
        text += c["delta"]["content"].get<std::string>();
      if (text.empty()) continue;
      if (s->last_text_at < 0)
        s->ttft = t;
      else
        s->gaps.push_back(t - s->last_text_at);
      s->last_text_at = t;
      s->text += text;
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    s->prompt_tokens = u.value("prompt_tokens", int64_t(0));
    s->completion_tokens = u.value("completion_tokens", int64_t(0));
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
      s->cached_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t(0));
  }
  return false;
}

namespace {

json common_fields(const LoadGenOptions& o) {
  json j = {{"max_tokens", o.gen_tokens},
            {"temperature", 0},
            {"ignore_eos", true},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!o.model.empty()) j["model"] = o.model;
  return j;
}

}  // namespace

json completion_body(const LoadGenOptions& o, const std::string& prompt) {
  json j = common_fields(o);
  j["prompt"] = prompt;
  return j;
}

json chat_body(const LoadGenOptions& o, const json& messages) {
  json j = common_fields(o);
  j["messages"] = messages;
  return j;
}

RequestSample run_one(const std::string& url, const std::string& path, const json& body, double timeout_seconds,
                      const std::string& api_key) {
  RequestSample s;
  httplib::Client cli(url);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(time_t(timeout_seconds), 0);
  cli.set_write_timeout(10, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.set_header("Content-Type", "application/json");
  if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
  req.body = body.dump();
  bool done = false;
  std::string head;  // the first bytes, for the error message of a non-200 answer
  auto t0 = std::chrono::steady_clock::now();
  SseParser parser([&](const std::string& payload) {
    if (apply_event(payload, seconds_since(t0), &s)) done = true;
  });
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (head.size() < 512) head.append(data, std::min(n, 512 - head.size()));
    parser.feed(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = cli.send(req, res, err);
  s.total = seconds_since(t0);
  if (!sent) {
    s.error = "transport error: " + httplib::to_string(err);
  } else if (res.status != 200) {
    s.error = "HTTP " + std::to_string(res.status) + ": " + head;
  } else if (s.error.empty() && !done) {
    s.error = "the stream ended without data: [DONE]";
  }
  if (s.last_text_at < 0) s.ttft = s.total;  // no text at all: the first "token" is the end
  s.ok = s.error.empty();
  return s;
}

namespace {

// What one request of a level sends: (path, body).
using MakeRequest = std::function<std::pair<std::string, json>(int index)>;

void aggregate(const std::vector<RequestSample>& samples, double wall, LevelReport* L) {
  std::vector<double> ttft, itl;
  L->requests = int(samples.size());
  L->wall_seconds = wall;
  for (const RequestSample& s : samples) {
    if (!s.ok) {
      ++L->errors;
      if (L->first_error.empty()) L->first_error = s.error;
      continue;
    }
    ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.gaps.begin(), s.gaps.end());
    L->prompt_tokens += s.prompt_tokens;
    L->cached_tokens += s.cached_tokens;
    L->completion_tokens += s.completion_tokens;
  }
  L->ttft = summarize(std::move(ttft));
  L->itl = summarize(std::move(itl));
  L->gen_tok_per_s = wall > 0 ? double(L->completion_tokens) / wall : 0;
  L->req_per_s = wall > 0 ? double(L->requests - L->errors) / wall : 0;
  L->cached_share = L->prompt_tokens > 0 ? double(L->cached_tokens) / double(L->prompt_tokens) : 0;
}

// `count` requests by `concurrency` threads, each taking the next index.
LevelReport run_level(const LoadGenOptions& o, int concurrency, int count, const MakeRequest& make) {
  std::vector<RequestSample> samples(static_cast<size_t>(count));
  std::atomic<int> next{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < std::min(concurrency, count); ++c)
    threads.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < count;) {
        auto [path, body] = make(i);
        samples[size_t(i)] = run_one(o.url, path, body, o.timeout_seconds, o.api_key);
      }
    });
  for (auto& t : threads) t.join();
  LevelReport L;
  L.concurrency = concurrency;
  aggregate(samples, seconds_since(t0), &L);
  return L;
}

// `concurrency` conversations of o.turns turns, all at once.
LevelReport run_turns_level(const LoadGenOptions& o, int concurrency, uint64_t level_index) {
  std::vector<std::vector<RequestSample>> by_turn(size_t(o.turns), std::vector<RequestSample>(size_t(concurrency)));
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int conv = 0; conv < concurrency; ++conv)
    threads.emplace_back([&, conv] {
      json messages = json::array();
      uint64_t stream = (level_index * 100000 + uint64_t(conv)) * 1000;
      for (int t = 0; t < o.turns; ++t) {
        RequestSample& s = by_turn[size_t(t)][size_t(conv)];
        messages.push_back({{"role", "user"}, {"content", make_words(o.seed, stream + uint64_t(t), o.prompt_words)}});
        s = run_one(o.url, "/v1/chat/completions", chat_body(o, messages), o.timeout_seconds, o.api_key);
        if (!s.ok) {
          for (int r = t + 1; r < o.turns; ++r) by_turn[size_t(r)][size_t(conv)].error = "an earlier turn failed";
          return;
        }
        messages.push_back({{"role", "assistant"}, {"content", s.text}});
      }
    });
  for (auto& t : threads) t.join();
  LevelReport L;
  L.concurrency = concurrency;
  std::vector<RequestSample> all;
  for (int t = 0; t < o.turns; ++t) {
    LevelReport per;
    aggregate(by_turn[size_t(t)], 0, &per);
    TurnReport tr;
    tr.turn = t + 1;
    tr.requests = per.requests;
    tr.errors = per.errors;
    tr.ttft = per.ttft;
    tr.cached_share = per.cached_share;
    L.turns.push_back(tr);
    all.insert(all.end(), by_turn[size_t(t)].begin(), by_turn[size_t(t)].end());
  }
  aggregate(all, seconds_since(t0), &L);
  return L;
}

}  // namespace

Expected<LoadReport> run_load(const LoadGenOptions& o) {
  if (o.url.empty()) return invalid_argument("--server: a URL such as http://127.0.0.1:8080 is required");
  if (o.concurrency.empty()) return invalid_argument("--concurrency: give at least one level");
  for (int c : o.concurrency)
    if (c <= 0 || c > 1024) return invalid_argument("--concurrency: every level must be in 1..1024");
  if (o.requests < 0) return invalid_argument("--requests must be >= 0");
  if (o.prompt_words <= 0 || o.gen_tokens <= 0) return invalid_argument("--prompt-words and --gen must be > 0");
  if (o.shared_prefix_words < 0 || o.suffix_words < 0 || o.turns < 0)
    return invalid_argument("--shared-prefix-words, --suffix-words and --turns must be >= 0");
  if (o.shared_prefix_words > 0 && o.turns > 0)
    return invalid_argument("--shared-prefix-words and --turns are different workloads: pick one");

  LoadReport r;
  r.options = o;
  r.mode = o.turns > 0 ? "turns" : o.shared_prefix_words > 0 ? "shared_prefix" : "sweep";
  const std::string prefix = make_words(o.seed, 0, o.shared_prefix_words);
  for (size_t li = 0; li < o.concurrency.size(); ++li) {
    int c = o.concurrency[li];
    if (r.mode == "turns") {
      r.levels.push_back(run_turns_level(o, c, li + 1));
      continue;
    }
    int count = o.requests > 0 ? o.requests : std::max(8, 4 * c);
    // Distinct streams per level and request, so no level reuses another's prompts (the prefix
    // cache would otherwise flatter later levels); the shared prefix is the same everywhere.
    uint64_t base = uint64_t(li + 1) * 1000000;
    MakeRequest make = [&, base](int i) {
      std::string prompt = r.mode == "shared_prefix"
                               ? prefix + " " + make_words(o.seed, base + uint64_t(i), o.suffix_words)
                               : make_words(o.seed, base + uint64_t(i), o.prompt_words);
      return std::make_pair(std::string("/v1/completions"), completion_body(o, prompt));
    };
    r.levels.push_back(run_level(o, c, count, make));
  }
  return r;
}

namespace {

json summary_json(const Summary& s) {
  return {{"p50_ms", s.p50 * 1e3}, {"p99_ms", s.p99 * 1e3}, {"mean_ms", s.mean * 1e3}, {"count", s.count}};
}

}  // namespace

json report_json(const LoadReport& r) {
  const LoadGenOptions& o = r.options;
  json j;
  j["server"] = o.url;
  j["mode"] = r.mode;
  j["workload"] = {{"prompt_words", o.prompt_words}, {"gen_tokens", o.gen_tokens},
                   {"shared_prefix_words", o.shared_prefix_words}, {"suffix_words", o.suffix_words},
                   {"turns", o.turns}, {"seed", o.seed}};
  j["levels"] = json::array();
  for (const LevelReport& L : r.levels) {
    json l = {{"concurrency", L.concurrency},
              {"requests", L.requests},
              {"errors", L.errors},
              {"wall_s", L.wall_seconds},
              {"gen_tok_per_s", L.gen_tok_per_s},
              {"req_per_s", L.req_per_s},
              {"ttft", summary_json(L.ttft)},
              {"itl", summary_json(L.itl)},
              {"prompt_tokens", L.prompt_tokens},
              {"cached_tokens", L.cached_tokens},
              {"completion_tokens", L.completion_tokens},
              {"cached_share", L.cached_share}};
    if (!L.first_error.empty()) l["first_error"] = L.first_error;
    if (!L.turns.empty()) {
      l["turns"] = json::array();
      for (const TurnReport& t : L.turns)
        l["turns"].push_back({{"turn", t.turn},
                              {"requests", t.requests},
                              {"errors", t.errors},
                              {"ttft", summary_json(t.ttft)},
                              {"cached_share", t.cached_share}});
    }
    j["levels"].push_back(l);
  }
  return j;
}

std::string report_table(const LoadReport& r) {
  const LoadGenOptions& o = r.options;
  std::string out;
  char b[512];
  if (r.mode == "shared_prefix")
    std::snprintf(b, sizeof b, "server %s | shared prefix %d words + suffix %d words | gen %d tokens\n", o.url.c_str(),
                  o.shared_prefix_words, o.suffix_words, o.gen_tokens);
  else if (r.mode == "turns")
    std::snprintf(b, sizeof b, "server %s | %d-turn chats, %d words per user message | gen %d tokens\n", o.url.c_str(),
                  o.turns, o.prompt_words, o.gen_tokens);
  else
    std::snprintf(b, sizeof b, "server %s | prompts of %d words | gen %d tokens\n", o.url.c_str(), o.prompt_words,
                  o.gen_tokens);
  out += b;
  std::snprintf(b, sizeof b, "%5s %5s %4s %8s %9s %7s %10s %10s %9s %9s %8s\n", "conc", "reqs", "err", "wall s",
                "gen tok/s", "req/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "cached");
  out += b;
  for (const LevelReport& L : r.levels) {
    std::snprintf(b, sizeof b, "%5d %5d %4d %8.2f %9.1f %7.2f %8.1fms %8.1fms %7.1fms %7.1fms %7.1f%%\n", L.concurrency,
                  L.requests, L.errors, L.wall_seconds, L.gen_tok_per_s, L.req_per_s, L.ttft.p50 * 1e3,
                  L.ttft.p99 * 1e3, L.itl.p50 * 1e3, L.itl.p99 * 1e3, 100.0 * L.cached_share);
    out += b;
    for (const TurnReport& t : L.turns) {
      std::snprintf(b, sizeof b, "      turn %2d: %d requests, %d errors, TTFT mean %.1f ms p50 %.1f ms, cached %.1f%%\n",
                    t.turn, t.requests, t.errors, t.ttft.mean * 1e3, t.ttft.p50 * 1e3, 100.0 * t.cached_share);
      out += b;
    }
    if (!L.first_error.empty()) out += "      first error: " + L.first_error + "\n";
  }
  if (r.mode == "shared_prefix")
    for (const LevelReport& L : r.levels) {
      std::snprintf(b, sizeof b, "concurrency %d: wall %.2f s, mean TTFT %.1f ms, cached-token share %.1f%%\n",
                    L.concurrency, L.wall_seconds, L.ttft.mean * 1e3, 100.0 * L.cached_share);
      out += b;
    }
  return out;
}

}  // namespace kvserve::loadgen
