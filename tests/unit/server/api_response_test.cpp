#include "server/api_response.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "server/access_log.h"

namespace kvserve::server {
namespace {

TEST(Sse, FramingIsOneDataLinePerEvent) {
  std::string ev = sse_data(json{{"text", "a\nb"}});
  EXPECT_EQ(ev, "data: {\"text\":\"a\\nb\"}\n\n");
  EXPECT_EQ(ev.find('\n'), ev.size() - 2);  // the newline in the text stays escaped
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Sse, InvalidUtf8DoesNotThrow) {
  std::string bad = "ok\xff";
  std::string out;
  EXPECT_NO_THROW(out = sse_data(json{{"text", bad}}));
  EXPECT_NE(out.find("ok"), std::string::npos);
}

TEST(ApiResponse, ErrorShape) {
  json e = error_json("max_tokens: too big", "invalid_request_error", "invalid_value");
  EXPECT_EQ(e["error"]["message"], "max_tokens: too big");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "invalid_value");
  EXPECT_TRUE(error_json("m", "t")["error"]["code"].is_null());
}

TEST(ApiResponse, Usage) {
  json u = usage_json(Usage{10, 5, 8});
  EXPECT_EQ(u["prompt_tokens"], 10);
  EXPECT_EQ(u["completion_tokens"], 5);
  EXPECT_EQ(u["total_tokens"], 15);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 8);
}

TEST(ApiResponse, LogprobLayouts) {
  std::vector<TokenLogprob> lps(2);
  lps[0].token = 1;
  lps[0].logprob = -0.5f;
  lps[0].top = {{1, -0.5f}, {2, -1.5f}};
  lps[1].token = 2;
  lps[1].logprob = -0.25f;
  PieceFn piece = [](int32_t id) { return id == 1 ? std::string("ab") : std::string("c"); };
  json c = completion_logprobs_json(lps, piece, 4);
  EXPECT_EQ(c["tokens"], json({"ab", "c"}));
  EXPECT_EQ(c["text_offset"], json({4, 6}));
  EXPECT_DOUBLE_EQ(c["top_logprobs"][0]["c"].get<double>(), -1.5);
  json ch = chat_logprobs_json(lps, piece);
  EXPECT_EQ(ch["content"][0]["token"], "ab");
  EXPECT_EQ(ch["content"][0]["bytes"], json({97, 98}));
  EXPECT_EQ(ch["content"][0]["top_logprobs"].size(), 2u);
}

TEST(AccessLog, TextAndJson) {
  AccessLogEntry e;
  e.id = 7;
  e.method = "POST";
  e.route = "/generate";
  e.status = 200;
  e.prompt_tokens = 5;
  e.cached_tokens = 2;
  e.generated_tokens = 9;
  e.ttft_ms = 1.25;
  e.finish_reason = "length";
  std::string t = format_access_log(e, false);
  for (const char* f : {"id=7", "route=/generate", "status=200", "prompt_tokens=5", "cached_tokens=2",
                        "generated_tokens=9", "queue_ms=", "ttft_ms=1.2", "total_ms=", "finish_reason=length"})
    EXPECT_NE(t.find(f), std::string::npos) << f << " in " << t;
  json j = json::parse(format_access_log(e, true));
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["generated_tokens"], 9);
  EXPECT_EQ(j["msg"], "request");
}

// A client's path can hold any byte once decoded: a text line never carries a raw control byte
// (no fake second line, no terminal escape), and the escaped path reads back exactly.
TEST(AccessLog, ControlCharactersInThePathAreEscaped) {
  AccessLogEntry e;
  e.method = "GET";
  for (const std::string route :
       {"/foo\nfake", "/bar\x1b[31mred", "/tab\there", "/back\\slash", "/del\x7f"}) {
    e.route = route;
    const std::string t = format_access_log(e, false);
    EXPECT_TRUE(std::none_of(t.begin(), t.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
    })) << t;
    const size_t at = t.find("route=") + 6;
    const std::string quoted = t.substr(at, t.find(" status=") - at);
    EXPECT_EQ(json::parse(quoted).get<std::string>(), route) << quoted;
  }
  e.route = "/v1/models";
  EXPECT_NE(format_access_log(e, false).find("route=/v1/models "), std::string::npos);  // plain stays bare
}

}  // namespace
}  // namespace kvserve::server
