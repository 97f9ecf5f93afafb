#include "server/api_request.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>

namespace kvserve::server {
namespace {

ApiLimits limits() {
  ApiLimits l;
  l.max_tokens_limit = 1000;
  return l;
}

Expected<ApiRequest> parse(const std::string& body, Route r = Route::kGenerate) {
  return parse_api_request(body, r, limits());
}

TEST(ApiRequest, GenerateMapsEveryField) {
  auto r = parse(R"({"prompt":"Once","max_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.2,
                     "seed":42,"stop":["a","b"],"ignore_eos":true,"repeat_penalty":1.1,"presence_penalty":0.5,
                     "frequency_penalty":-0.5,"repeat_last_n":-1,"cache_salt":"t1"})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "Once");
  EXPECT_EQ(r->params.max_tokens, 7);
  EXPECT_EQ(r->params.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r->params.top_p, 0.5f);
  EXPECT_EQ(r->params.top_k, 3);
  EXPECT_FLOAT_EQ(r->params.min_p, 0.2f);
  EXPECT_EQ(r->params.seed, 42u);
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->params.ignore_eos);
  EXPECT_FLOAT_EQ(r->params.repeat_penalty, 1.1f);
  EXPECT_EQ(r->params.repeat_last_n, -1);
  EXPECT_EQ(r->cache_salt, "t1");
}

TEST(ApiRequest, MaxLengthIsAnAliasAndStopMayBeAString) {
  auto r = parse(R"({"prompt":"x","max_length":9,"stop":"END"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.max_tokens, 9);
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"END"});
}

TEST(ApiRequest, OpenAIDefaults) {
  auto r = parse(R"({"prompt":"x"})", Route::kCompletion);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.temperature, 1.0f);
  EXPECT_EQ(r->params.top_k, 0);
  EXPECT_EQ(r->params.min_p, 0.0f);
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_FALSE(r->stream);
}

TEST(ApiRequest, CompletionPromptForms) {
  auto a = parse(R"({"prompt":["one string"]})", Route::kCompletion);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->prompts.size(), 1u);
  EXPECT_EQ(a->prompts[0].text, "one string");
  auto b = parse(R"({"prompt":[1,2,3]})", Route::kCompletion);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->prompts.size(), 1u);
  EXPECT_EQ(b->prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  // Batches: strings, token-id lists, or both.
  auto c = parse(R"({"prompt":["a","b c",[5,6]]})", Route::kCompletion);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->prompts.size(), 3u);
  EXPECT_EQ(c->prompts[1].text, "b c");
  EXPECT_EQ(c->prompts[2].tokens, (std::vector<int32_t>{5, 6}));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"prompt":[]})", "prompt"},          {R"({"prompt":["a",""]})", "prompt[1]"},
      {R"({"prompt":["a",[]]})", "prompt[1]"}, {R"({"prompt":["a",[1,-2]]})", "prompt[1]"},
      {R"({"prompt":["a",7]})", "prompt[1]"},  {R"({"prompt":[1,"a"]})", "prompt"},
      {R"({"prompt":{"a":1}})", "prompt"},
  };
  for (const auto& [body, field] : bad) {
    auto e = parse(body, Route::kCompletion);
    ASSERT_FALSE(e.ok()) << body;
    EXPECT_EQ(e.status().message().rfind(std::string(field) + ":", 0), 0u)
        << body << " -> " << e.status().message();
  }
  std::string many = R"({"prompt":[)";
  for (size_t i = 0; i <= kMaxBatchPrompts; ++i) many += i ? ",\"x\"" : "\"x\"";
  EXPECT_FALSE(parse(many + "]}", Route::kCompletion).ok());
  EXPECT_FALSE(parse(R"({"prompt":["a","b"]})", Route::kGenerate).ok());  // batches: completions only
}

TEST(ApiRequest, StreamOptionsAndLogprobs) {
  auto c = parse(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true},"logprobs":3})",
                 Route::kCompletion);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->stream);
  EXPECT_TRUE(c->include_usage);
  EXPECT_TRUE(c->logprobs);
  EXPECT_EQ(c->top_logprobs, 3);
  auto chat = parse(R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":2})", Route::kChat);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_TRUE(chat->logprobs);
  EXPECT_EQ(chat->top_logprobs, 2);
}

TEST(ApiRequest, ChatMessages) {
  auto r = parse(R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},
                 {"type":"text","text":"b"}]}],"max_completion_tokens":5})",
                 Route::kChat);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_EQ(r->params.max_tokens, 5);
  EXPECT_TRUE(r->max_tokens_given);
}

struct BadCase {
  Route route;
  const char* body;
  const char* field;  // must appear in the message
};

// A body that is not JSON is refused with where the parser stopped and why, without echoing
// the text it last read (which can be the whole of a long string).
TEST(ApiRequest, MalformedJsonSaysWhereAndWhy) {
  const struct {
    std::string body, where, why;
  } cases[] = {
      {R"({"prompt":)", "at line 1, column 11", "unexpected end of input"},
      {R"({"prompt":"a\ud800b"})", "at line 1, column 19", "surrogate"},
      {"{\n\"prompt\": \"x\",\n}", "at line 3, column 1", "expected string literal"},
      {R"({"a":1}{)", "at line 1, column 8", "expected end of input"},
      {"", "at line 1, column 1", "unexpected end of input"},
      {"{\"prompt\":\"" + std::string(5000, 'x'), "at line 1, column 5012", "missing closing quote"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind("body: malformed JSON " + c.where + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(c.why), std::string::npos) << m;
    EXPECT_EQ(m.find("last read"), std::string::npos) << m;
    EXPECT_LT(m.size(), 400u);
  }
}

// A request that names no seed says so (the route then draws one with fresh_seed, so repeated
// requests differ); one that names a seed keeps it.
TEST(ApiRequest, SeedGivenOrDrawn) {
  auto none = parse(R"({"prompt":"x"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->seed_given);
  auto some = parse(R"({"prompt":"x","seed":12})");
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE(some->seed_given);
  EXPECT_EQ(some->params.seed, 12u);
  std::set<uint64_t> drawn;
  for (int i = 0; i < 8; ++i) {
    const uint64_t s = fresh_seed();
    EXPECT_LE(s, uint64_t(INT64_MAX));
    drawn.insert(s);
  }
  EXPECT_EQ(drawn.size(), 8u);
}

TEST(ApiRequest, EveryRejectionNamesTheField) {
  const BadCase cases[] = {
      {Route::kGenerate, "{not json", "JSON"},
      {Route::kGenerate, "[1,2]", "body"},
      {Route::kGenerate, "{}", "prompt"},
      {Route::kGenerate, R"({"prompt":5})", "prompt"},
      {Route::kGenerate, R"({"prompt":""})", "prompt"},
      {Route::kGenerate, R"({"prompt":["a"]})", "prompt"},
      {Route::kGenerate, R"({"prompt":"x","max_tokens":-1})", "max_tokens"},
      {Route::kGenerate, R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {Route::kGenerate, R"({"prompt":"x","max_tokens":1000000})", "1000"},
      {Route::kGenerate, R"({"prompt":"x","max_tokens":"5"})", "max_tokens"},
      {Route::kGenerate, R"({"prompt":"x","max_tokens":5.5})", "max_tokens"},
      {Route::kGenerate, R"({"prompt":"x","max_length":-3})", "max_length"},
      {Route::kGenerate, R"({"prompt":"x","temperature":-1})", "temperature"},
      {Route::kGenerate, R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {Route::kGenerate, R"({"prompt":"x","top_p":0})", "top_p"},
      {Route::kGenerate, R"({"prompt":"x","top_p":1.5})", "top_p"},
      {Route::kGenerate, R"({"prompt":"x","top_k":-2})", "top_k"},
      {Route::kGenerate, R"({"prompt":"x","min_p":2})", "min_p"},
      {Route::kGenerate, R"({"prompt":"x","seed":-1})", "seed"},
      {Route::kGenerate, R"({"prompt":"x","stop":5})", "stop"},
      {Route::kGenerate, R"({"prompt":"x","stop":[""]})", "stop"},
      {Route::kGenerate, R"({"prompt":"x","ignore_eos":"yes"})", "ignore_eos"},
      {Route::kGenerate, R"({"prompt":"x","stream":1})", "stream"},
      {Route::kGenerate, R"({"prompt":"x","presence_penalty":3})", "presence_penalty"},
      {Route::kCompletion, R"({"prompt":"x","n":17})", "n"},
      {Route::kGenerate, R"({"prompt":"x","n":2})", "n"},
      {Route::kCompletion, R"({"prompt":"x","logprobs":true})", "logprobs"},
      {Route::kCompletion, R"({"prompt":"x","logprobs":21})", "logprobs"},
      {Route::kCompletion, R"({"prompt":[1,-2]})", "prompt"},
      {Route::kCompletion, R"({"prompt":"x","stream_options":{"include_usage":1}})",
       "stream_options.include_usage"},
      {Route::kChat, R"({"prompt":"x"})", "messages"},
      {Route::kChat, R"({"messages":[]})", "messages"},
      {Route::kChat, R"({"messages":["hi"]})", "messages[0]"},
      {Route::kChat, R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {Route::kChat, R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {Route::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content"},
      {Route::kChat, R"({"messages":[{"role":"user","content":"x"}],"logprobs":2})", "logprobs"},
      {Route::kChat, R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs"},
  };
  for (const auto& c : cases) {
    auto r = parse_api_request(c.body, c.route, limits());
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << c.body << " -> " << r.status().message();
  }
}

// response_format json_object (every route) asks the engine for one JSON object; text and null
// leave the output free.
TEST(ApiRequest, ResponseFormatJsonObject) {
  for (Route route : {Route::kGenerate, Route::kCompletion, Route::kChat}) {
    const std::string head =
        route == Route::kChat ? R"({"messages":[{"role":"user","content":"x"}])" : R"({"prompt":"x")";
    auto r = parse(head + R"(,"response_format":{"type":"json_object"}})", route);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r->params.json_object);
    for (const char* free : {R"(,"response_format":{"type":"text"}})", R"(,"response_format":null})", "}"}) {
      r = parse(head + free, route);
      ASSERT_TRUE(r.ok()) << free;
      EXPECT_FALSE(r->params.json_object) << free;
    }
  }
}

TEST(ApiRequest, FieldsThatCannotBeHonouredAreRefusedUnlessNeutral) {
  // Neutral values, as client libraries send them by default, pass on every route.
  for (Route route : {Route::kGenerate, Route::kCompletion, Route::kChat}) {
    const std::string head = route == Route::kChat ? R"({"messages":[{"role":"user","content":"x"}])" : R"({"prompt":"x")";
    for (const char* neutral :
         {R"("response_format":{"type":"text"})", R"("response_format":null)", R"("tools":[])",
          R"("tool_choice":"none")", R"("tool_choice":"auto")", R"("logit_bias":{})", R"("echo":false)",
          R"("suffix":"")", R"("best_of":1)", R"("functions":null)", R"("modalities":["text"])",
          R"("audio":null)", R"("modalities":null)"}) {
      auto r = parse(head + "," + neutral + "}", route);
      EXPECT_TRUE(r.ok()) << neutral << ": " << r.status().message();
    }
  }
  const std::pair<const char*, const char*> refused[] = {
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{}}})",
       "response_format"},
      {R"("response_format":{"type":"xml"})", "response_format"},
      {R"("response_format":"json")", "response_format"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}])", "tools"},
      {R"("functions":[{"name":"f"}])", "functions"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tool_choice":{"type":"function","function":{"name":"f"}})", "tool_choice"},
      {R"("function_call":{"name":"f"})", "function_call"},
      {R"("suffix":"end")", "suffix"},
      {R"("best_of":3)", "best_of"},
      {R"("modalities":["text","audio"])", "modalities"},
      {R"("modalities":"text")", "modalities"},
      {R"("audio":{"voice":"alloy","format":"wav"})", "audio"},
  };
  for (const auto& [field, name] : refused) {
    auto r = parse(std::string(R"({"prompt":"x",)") + field + "}", Route::kCompletion);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().message().rfind(name, 0), 0u) << r.status().message();
  }
}

TEST(ApiRequest, EchoOnCompletionsOnly) {
  auto r = parse(R"({"prompt":"x","echo":true,"max_tokens":0,"logprobs":1})", Route::kCompletion);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->params.max_tokens, 0);  // scoring the prompt alone
  EXPECT_FALSE(parse(R"({"prompt":"x","max_tokens":0})", Route::kCompletion).ok());  // no echo: >= 1
  EXPECT_FALSE(parse(R"({"prompt":"x","echo":"yes"})", Route::kCompletion).ok());
  for (Route route : {Route::kGenerate, Route::kChat}) {
    const std::string head =
        route == Route::kChat ? R"({"messages":[{"role":"user","content":"x"}])" : R"({"prompt":"x")";
    auto e = parse(head + R"(,"echo":true})", route);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().message().rfind("echo", 0), 0u) << e.status().message();
    EXPECT_TRUE(parse(head + R"(,"echo":false})", route).ok());
  }
}

TEST(ApiRequest, LogitBiasInBothForms) {
  // OpenAI's object of id strings, and llama.cpp's [id, bias] pairs with false as a ban.
  auto r = parse(R"({"prompt":"x","logit_bias":{"13":-100,"7":2.5}})", Route::kCompletion);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto biases = r->params.logit_bias;
  std::sort(biases.begin(), biases.end());
  EXPECT_EQ(biases, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {13, -100.0f}}));
  r = parse(R"({"prompt":"x","logit_bias":[[13,false],[7,-1]]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->params.logit_bias, (std::vector<std::pair<int32_t, float>>{{13, -100.0f}, {7, -1.0f}}));
  EXPECT_TRUE(parse(R"({"prompt":"x","logit_bias":{}})")->params.logit_bias.empty());
  const std::pair<const char*, const char*> bad[] = {
      {R"({"prompt":"x","logit_bias":{"x":1}})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"-3":1}})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"3":100.5}})", "logit_bias[\"3\"]"},
      {R"({"prompt":"x","logit_bias":{"3":true}})", "logit_bias[\"3\"]"},
      {R"({"prompt":"x","logit_bias":[[3]]})", "logit_bias[0]"},
      {R"({"prompt":"x","logit_bias":[["3",1]]})", "logit_bias[0]"},
      {R"({"prompt":"x","logit_bias":7})", "logit_bias"},
  };
  for (const auto& [body, field] : bad) {
    auto e = parse(body);
    ASSERT_FALSE(e.ok()) << body;
    EXPECT_EQ(e.status().message().rfind(field, 0), 0u) << body << " -> " << e.status().message();
  }
  std::string many = R"({"prompt":"x","logit_bias":{)";
  for (size_t i = 0; i <= kMaxLogitBiasTokens; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  EXPECT_FALSE(parse(many + "}}").ok());
}

TEST(ApiRequest, ResolveMaxTokensAgainstTheContext) {
  auto r = parse(R"({"prompt":"x","max_tokens":100})");
  ASSERT_TRUE(r.ok());
  auto ok = resolve_max_tokens(*r, 10, 512, limits());
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 100);
  auto over = resolve_max_tokens(*r, 450, 512, limits());
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("max_tokens"), std::string::npos);
  EXPECT_NE(over.status().message().find("512"), std::string::npos);
  auto full = resolve_max_tokens(*r, 512, 512, limits());
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("prompt"), std::string::npos);
  // Chat without max_tokens runs to the context end, capped by the limit.
  auto chat = parse(R"({"messages":[{"role":"user","content":"x"}]})", Route::kChat);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*resolve_max_tokens(*chat, 12, 512, limits()), 500);
  EXPECT_EQ(*resolve_max_tokens(*chat, 12, 4096, limits()), 1000);
}

TEST(ApiRequest, ResolveMaxTokensUnderTruncateOnlyNeedsRoomForMaxTokens) {
  ApiLimits t = limits();
  t.truncate_prompt = true;
  auto r = parse(R"({"prompt":"x","max_tokens":100})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*resolve_max_tokens(*r, 600, 512, t), 100);  // the engine cuts the prompt to 412
  auto huge = parse(R"({"prompt":"x","max_tokens":511})");
  ASSERT_TRUE(huge.ok());
  auto no_room = resolve_max_tokens(*huge, 10, 512, t);
  ASSERT_FALSE(no_room.ok());
  EXPECT_NE(no_room.status().message().find("512"), std::string::npos);
  auto chat = parse(R"({"messages":[{"role":"user","content":"x"}]})", Route::kChat);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*resolve_max_tokens(*chat, 12, 512, t), 500);  // fits: to the context end as before
  EXPECT_EQ(*resolve_max_tokens(*chat, 900, 512, t), 256); // overflows: half the context
}

}  // namespace
}  // namespace kvserve::server
