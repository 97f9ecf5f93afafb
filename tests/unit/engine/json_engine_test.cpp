// SamplingParams::json_object through the engine on stories260K (a model that has never seen
// JSON): every answer is a prefix of one JSON object, an answer that ends "stop" is one, and a
// constrained request batched beside a free one leaves the free one's text unchanged.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/stories_engine.h"
#include "engine/json_prefix.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;

GenerationRequest json_request(Engine& e, uint64_t seed, float temperature) {
  GenerationRequest r;
  r.prompt = e.tokenize("Once upon a time", true, false);
  r.params.json_object = true;
  r.params.temperature = temperature;
  r.params.seed = seed;
  r.params.max_tokens = 200;
  return r;
}

TEST(JsonObjectEngine, AnswersAreJsonObjectsOrTheirPrefixes) {
  auto e = test::make_engine(test::stories_config());
  ASSERT_NE(e, nullptr);
  int closed = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto h = e->submit(json_request(*e, seed, seed == 1 ? 0.0f : 1.0f));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    const RequestResult res = (*h)->wait();
    ASSERT_TRUE(res.finish_reason == "stop" || res.finish_reason == "length")
        << res.finish_reason << res.error;
    JsonPrefix m;
    EXPECT_TRUE(m.feed(res.text)) << res.text;
    EXPECT_EQ(m.complete(), res.finish_reason == "stop") << res.text;
    if (res.finish_reason == "stop") {
      ++closed;
      const auto parsed = nlohmann::json::parse(res.text, nullptr, false);
      EXPECT_TRUE(parsed.is_object()) << res.text;
    } else {
      EXPECT_EQ(res.generated_tokens, 200);
    }
  }
  std::printf("%d of 8 answers closed their object within 200 tokens\n", closed);
  test::wait_for_blocks_released(*e);
}

// The object's end ends the request: with "}" all but forced (logit_bias 100) the answer is the
// empty object, "stop", without an end-of-generation token; with "}" and ',' banned it never
// closes and runs to max_tokens.
TEST(JsonObjectEngine, TheRequestEndsWhenTheObjectCloses) {
  auto e = test::make_engine(test::stories_config());
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> braces = e->tokenize("{}", false, false);
  ASSERT_FALSE(braces.empty());
  const int32_t close = braces.back();
  ASSERT_EQ(e->detokenize({close}), "}");
  GenerationRequest r = json_request(*e, 5, 1.0f);
  r.params.logit_bias = {{close, 100.0f}};
  auto h = e->submit(r);
  ASSERT_TRUE(h.ok());
  RequestResult res = (*h)->wait();
  EXPECT_EQ(res.finish_reason, "stop");
  EXPECT_EQ(nlohmann::json::parse(res.text, nullptr, false), nlohmann::json::object()) << res.text;

  r.params.logit_bias = {{close, -100.0f}};
  r.params.max_tokens = 30;
  h = e->submit(r);
  ASSERT_TRUE(h.ok());
  res = (*h)->wait();
  EXPECT_EQ(res.finish_reason, "length");
  EXPECT_EQ(res.generated_tokens, 30);
  test::wait_for_blocks_released(*e);
}

TEST(JsonObjectEngine, AFreeRequestBesideAConstrainedOneIsUnchanged) {
  auto e = test::make_engine(test::stories_config());
  ASSERT_NE(e, nullptr);
  GenerationRequest free;
  free.prompt = e->tokenize("The little dog", true, false);
  free.params.temperature = 0;
  free.params.max_tokens = 40;
  auto alone = e->submit(free);
  ASSERT_TRUE(alone.ok());
  const std::string alone_text = (*alone)->wait().text;

  auto constrained = e->submit(json_request(*e, 3, 1.0f));
  auto beside = e->submit(free);
  ASSERT_TRUE(constrained.ok() && beside.ok());
  EXPECT_EQ((*beside)->wait().text, alone_text);
  const RequestResult c = (*constrained)->wait();
  JsonPrefix m;
  EXPECT_TRUE(m.feed(c.text)) << c.text;
  test::wait_for_blocks_released(*e);
}

}  // namespace
}  // namespace kvserve
