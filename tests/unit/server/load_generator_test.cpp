// The load generator's pieces (deterministic prompts, percentiles, SSE parsing, event folding)
// and a whole run against an in-process fake server that streams a fixed answer.
#include "server/load_generator.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <set>
#include <sstream>
#include <thread>

namespace kvserve::loadgen {
namespace {

int count_words(const std::string& s) {
  std::istringstream in(s);
  std::string w;
  int n = 0;
  while (in >> w) ++n;
  return n;
}

TEST(LoadGen, WordsAreDeterministicPerSeedAndStream) {
  EXPECT_EQ(make_words(7, 3, 50), make_words(7, 3, 50));
  EXPECT_NE(make_words(7, 3, 50), make_words(7, 4, 50));
  EXPECT_NE(make_words(7, 3, 50), make_words(8, 3, 50));
  EXPECT_EQ(count_words(make_words(1, 0, 100)), 100);
  EXPECT_EQ(make_words(1, 0, 0), "");
  // A prefix of a longer draw: the same generator state sequence.
  EXPECT_EQ(make_words(5, 9, 100).rfind(make_words(5, 9, 10), 0), 0u);
  std::set<std::string> distinct;
  for (int i = 0; i < 100; ++i) distinct.insert(make_words(1, uint64_t(i), 20));
  EXPECT_EQ(distinct.size(), 100u);
}

TEST(LoadGen, PercentilesInterpolate) {
  std::vector<double> v;
  for (int i = 1; i <= 101; ++i) v.push_back(double(102 - i));  // unsorted 101..1
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 51);
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 100);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 1), 101);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 0.5), 1.5);
  Summary s = summarize({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_EQ(s.count, 4);
}

TEST(LoadGen, SseParserHandlesAnyChunking) {
  const std::string stream = "data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\n: comment\nevent: x\ndata:[DONE]\n\n";
  for (size_t step : {size_t(1), size_t(2), size_t(7), stream.size()}) {
    std::vector<std::string> got;
    SseParser p([&](const std::string& d) { got.push_back(d); });
    for (size_t i = 0; i < stream.size(); i += step) p.feed(stream.data() + i, std::min(step, stream.size() - i));
    ASSERT_EQ(got.size(), 3u) << "step " << step;
    EXPECT_EQ(got[0], "{\"a\":1}");
    EXPECT_EQ(got[1], "{\"b\":2}");
    EXPECT_EQ(got[2], "[DONE]");
  }
}

TEST(LoadGen, EventsGiveTtftGapsUsageAndErrors) {
  RequestSample s;
  EXPECT_FALSE(apply_event(R"({"choices":[{"text":""}]})", 0.05, &s));  // no text: no token yet
  EXPECT_FALSE(apply_event(R"({"choices":[{"text":"Once"}]})", 0.1, &s));
  EXPECT_FALSE(apply_event(R"({"choices":[{"delta":{"content":" upon"}}]})", 0.15, &s));
  EXPECT_FALSE(apply_event(R"({"choices":[{"text":" a"}],"usage":null})", 0.3, &s));
  EXPECT_FALSE(apply_event(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}})",
      0.31, &s));
  EXPECT_TRUE(apply_event("[DONE]", 0.32, &s));
  EXPECT_DOUBLE_EQ(s.ttft, 0.1);
  ASSERT_EQ(s.gaps.size(), 2u);
  EXPECT_NEAR(s.gaps[0], 0.05, 1e-12);
  EXPECT_NEAR(s.gaps[1], 0.15, 1e-12);
  EXPECT_EQ(s.text, "Once upon a");
  EXPECT_EQ(s.prompt_tokens, 12);
  EXPECT_EQ(s.cached_tokens, 8);
  EXPECT_EQ(s.completion_tokens, 3);
  EXPECT_TRUE(s.error.empty());

  RequestSample e;
  apply_event(R"({"choices":[],"error":{"message":"engine died"}})", 0.1, &e);
  EXPECT_EQ(e.error, "engine died");
  RequestSample m;
  apply_event("{not json", 0.1, &m);
  EXPECT_NE(m.error.find("malformed"), std::string::npos);
}

TEST(LoadGen, BodiesAskForStreamingWithUsage) {
  LoadGenOptions o;
  o.gen_tokens = 7;
  nlohmann::json c = completion_body(o, "hello");
  EXPECT_EQ(c["prompt"], "hello");
  EXPECT_EQ(c["max_tokens"], 7);
  EXPECT_EQ(c["stream"], true);
  EXPECT_EQ(c["stream_options"]["include_usage"], true);
  EXPECT_FALSE(c.contains("model"));
  o.model = "m";
  nlohmann::json ch = chat_body(o, nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}}));
  EXPECT_EQ(ch["messages"][0]["content"], "hi");
  EXPECT_EQ(ch["model"], "m");
}

TEST(LoadGen, RejectsBadOptions) {
  LoadGenOptions o;
  EXPECT_FALSE(run_load(o).ok());  // no URL
  o.url = "http://127.0.0.1:1";
  o.concurrency = {};
  EXPECT_FALSE(run_load(o).ok());
  o.concurrency = {0};
  EXPECT_FALSE(run_load(o).ok());
  o.concurrency = {1};
  o.turns = 2;
  o.shared_prefix_words = 10;
  EXPECT_FALSE(run_load(o).ok());
}

// A fake OpenAI-style server: streams three text chunks, a usage chunk and [DONE]; counts the
// requests and the chat messages it saw; answers 500 to a prompt that starts with "fail".
class FakeServer {
 public:
  FakeServer() {
    auto stream = [this](const httplib::Request& req, httplib::Response& res) {
      auto j = nlohmann::json::parse(req.body);
      ++requests;
      if (j.contains("messages")) max_messages = std::max<int>(max_messages, int(j["messages"].size()));
      if (j.contains("prompt") && j["prompt"].get<std::string>().rfind("fail", 0) == 0) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"boom"}})", "application/json");
        return;
      }
      bool chat = j.contains("messages");
      std::string body;
      for (const char* t : {"a", "b", "c"}) {
        nlohmann::json ev = chat ? nlohmann::json{{"choices", {{{"delta", {{"content", t}}}}}}}
                                 : nlohmann::json{{"choices", {{{"text", t}}}}};
        body += "data: " + ev.dump() + "\n\n";
      }
      body += R"(data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}})";
      body += "\n\ndata: [DONE]\n\n";
      res.set_content(body, "text/event-stream");
    };
    svr_.Post("/v1/completions", stream);
    svr_.Post("/v1/chat/completions", stream);
    port_ = svr_.bind_to_any_port("127.0.0.1");
    th_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    svr_.stop();
    th_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::atomic<int> requests{0};
  std::atomic<int> max_messages{0};

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread th_;
};

TEST(LoadGen, SweepAgainstAFakeServer) {
  FakeServer fake;
  LoadGenOptions o;
  o.url = fake.url();
  o.concurrency = {1, 3};
  o.requests = 5;
  o.prompt_words = 10;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->mode, "sweep");
  ASSERT_EQ(r->levels.size(), 2u);
  EXPECT_EQ(fake.requests.load(), 10);
  for (const LevelReport& L : r->levels) {
    EXPECT_EQ(L.requests, 5);
    EXPECT_EQ(L.errors, 0) << L.first_error;
    EXPECT_EQ(L.completion_tokens, 15);
    EXPECT_EQ(L.prompt_tokens, 50);
    EXPECT_DOUBLE_EQ(L.cached_share, 0.4);
    EXPECT_EQ(L.ttft.count, 5);
    EXPECT_EQ(L.itl.count, 10);  // two gaps per request
    EXPECT_GT(L.gen_tok_per_s, 0);
  }
  nlohmann::json j = report_json(*r);
  EXPECT_EQ(j["levels"][1]["concurrency"], 3);
  EXPECT_TRUE(j["levels"][0]["ttft"].contains("p99_ms"));
  EXPECT_NE(report_table(*r).find("TTFT p50"), std::string::npos);
}

TEST(LoadGen, ErrorsAreCountedNotFatal) {
  FakeServer fake;
  // Nothing listens on port 1: every request fails to connect, and the run still reports.
  LoadGenOptions o;
  o.url = "http://127.0.0.1:1";
  o.concurrency = {2};
  o.requests = 4;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->levels[0].errors, 4);
  EXPECT_NE(r->levels[0].first_error.find("transport"), std::string::npos) << r->levels[0].first_error;
  // A non-200 answer names its status.
  RequestSample s = run_one(fake.url(), "/v1/completions", nlohmann::json{{"prompt", "fail now"}}, 10);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.error.find("HTTP 500"), std::string::npos) << s.error;
}

TEST(LoadGen, TurnsGrowTheConversation) {
  FakeServer fake;
  LoadGenOptions o;
  o.url = fake.url();
  o.concurrency = {2};
  o.turns = 3;
  o.prompt_words = 5;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mode, "turns");
  const LevelReport& L = r->levels[0];
  ASSERT_EQ(L.turns.size(), 3u);
  EXPECT_EQ(L.requests, 6);
  EXPECT_EQ(L.errors, 0) << L.first_error;
  EXPECT_EQ(fake.max_messages.load(), 5);  // user, assistant, user, assistant, user
  EXPECT_EQ(L.turns[2].requests, 2);
}

TEST(LoadGen, SharedPrefixMode) {
  FakeServer fake;
  LoadGenOptions o;
  o.url = fake.url();
  o.concurrency = {2};
  o.requests = 3;
  o.shared_prefix_words = 30;
  o.suffix_words = 4;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->mode, "shared_prefix");
  EXPECT_NE(report_table(*r).find("cached-token share"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::loadgen
