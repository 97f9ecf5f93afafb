// Greedy golden: stories260K reproduces the reference's 200-token greedy continuations exactly,
// and generation with the KV cache equals generation with --no-cache token for token.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "golden_util.h"

namespace kvserve::golden {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ltrim(std::string s) {
  size_t i = s.find_first_not_of(" \t\n");
  return i == std::string::npos ? "" : s.substr(i);
}
std::string rtrim(std::string s) {
  size_t i = s.find_last_not_of(" \t\n");
  return i == std::string::npos ? "" : s.substr(0, i + 1);
}

SamplingParams greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = false;
  return p;
}

const char* kPrompts[] = {"Once upon a time", "One day, a little boy named Tim",
                          "The sun was shining and the birds were singing. Lily", "Max had a red ball. He liked to"};

TEST(GreedyGolden, Stories260KMatchesReference) {
  auto gen = make("stories260K.gguf");
  ASSERT_TRUE(gen);
  for (int i = 0; i < 4; ++i) {
    const Tokenizer& tok = gen->tokenizer();
    std::vector<int32_t> prompt = tok.encode(kPrompts[i], true, false);
    std::string text;
    for (int32_t id : prompt) text += tok.token_to_piece(id);
    auto res = gen->generate(prompt, greedy(200));
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    EXPECT_EQ(res->tokens.size(), 200u);
    text += res->text;
    std::string expected = read_file(shared_path("golden/greedy/stories260K.p" + std::to_string(i + 1) + ".txt"));
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(rtrim(ltrim(text)), rtrim(ltrim(expected))) << "prompt p" << i + 1;
  }
}

TEST(GreedyGolden, FirstIdsAfterBos) {
  // ../shared/models/README.md lists the first 64 greedy ids after BOS.
  const std::vector<int32_t> expected = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395,
                                         317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                         265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432,
                                         352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
                                         398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310};
  auto gen = make("stories260K.gguf");
  ASSERT_TRUE(gen);
  auto res = gen->generate({gen->tokenizer().bos_id()}, greedy(64));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->tokens, expected);
}

class CacheVsNoCache : public ::testing::TestWithParam<const char*> {};

TEST_P(CacheVsNoCache, SameGreedyTokensOver200Steps) {
  auto cached = make(GetParam(), KvDType::F32, true);
  auto uncached = make(GetParam(), KvDType::F32, false);
  ASSERT_TRUE(cached && uncached);
  std::vector<int32_t> prompt = cached->tokenizer().encode("Once upon a time", true, false);
  SamplingParams p = greedy(200);
  p.ignore_eos = true;  // random-weight models may emit EOS at any point
  auto a = cached->generate(prompt, p);
  auto b = uncached->generate(prompt, p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens.size(), 200u);
  EXPECT_EQ(a->tokens, b->tokens);
}

INSTANTIATE_TEST_SUITE_P(Models, CacheVsNoCache,
                         ::testing::Values("stories260K.gguf", "tiny/tiny-llama-f32.gguf", "tiny/tiny-llama-q8_0.gguf",
                                           "tiny/tiny-llama-q4_k_m.gguf", "tiny/tiny-qwen2-f32.gguf",
                                           "tiny/tiny-qwen2-q4_k_m.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           n = n.substr(n.rfind('/') + 1);
                           n = n.substr(0, n.find(".gguf"));
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Generation, SeedIsDeterministic) {
  auto gen = make("stories260K.gguf");
  ASSERT_TRUE(gen);
  std::vector<int32_t> prompt = gen->tokenizer().encode("Once upon a time", true, false);
  SamplingParams p;
  p.temperature = 0.9f;
  p.max_tokens = 60;
  p.seed = 1234;
  auto a = gen->generate(prompt, p);
  auto b = gen->generate(prompt, p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  p.seed = 99;
  auto c = gen->generate(prompt, p);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->tokens, c->tokens);
}

TEST(Generation, StopStringCutsText) {
  auto gen = make("stories260K.gguf");
  ASSERT_TRUE(gen);
  std::vector<int32_t> prompt = gen->tokenizer().encode("Once upon a time", true, false);
  SamplingParams p = greedy(200);
  p.stop = {"Lily"};
  auto res = gen->generate(prompt, p);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish_reason, "stop");
  EXPECT_EQ(res->text, ", there was a little girl named ");
}

TEST(Generation, PromptLongerThanContextIsAnError) {
  auto gen = make("stories260K.gguf", KvDType::F32, true, 32);
  ASSERT_TRUE(gen);
  std::vector<int32_t> prompt(40, 300);
  auto res = gen->generate(prompt, greedy(4));
  EXPECT_FALSE(res.ok());
  // The engine is still usable afterwards.
  auto ok = gen->generate({1}, greedy(4));
  EXPECT_TRUE(ok.ok());
}

TEST(Generation, StopsAtContextEnd) {
  auto gen = make("stories260K.gguf", KvDType::F32, true, 48);
  ASSERT_TRUE(gen);
  SamplingParams p = greedy(500);
  p.ignore_eos = true;
  auto res = gen->generate({1}, p);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish_reason, "length");
  EXPECT_EQ(res->tokens.size(), 47u);  // prompt + generated tokens fill the 48-token context
}

}  // namespace
}  // namespace kvserve::golden
