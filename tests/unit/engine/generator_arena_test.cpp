// A Generator told how many tokens its run can hold (GeneratorOptions::max_tokens_held, what
// `kvserve generate` passes) allocates that many, not the whole context, and generates the same
// tokens; a bound that is too small ends in an error, not in a write past the arena.
#include <gtest/gtest.h>

#include "common/greedy.h"
#include "engine/generator.h"

namespace kvserve {
namespace {

std::string model_path() { return std::string(KVS_SHARED_DIR) + "/models/stories260K.gguf"; }

std::unique_ptr<Generator> make(int64_t held, int64_t ctx = 0) {
  GeneratorOptions o;
  o.model_path = model_path();
  o.threads = 1;
  o.max_tokens_held = held;
  o.ctx = ctx;
  auto g = Generator::create(o);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(g).value() : nullptr;
}

using test::greedy_ignoring_eos;

TEST(GeneratorArena, ABoundedRunAllocatesWhatItHoldsAndGeneratesTheSameTokens) {
  auto full = make(0);
  ASSERT_TRUE(full);
  const std::vector<int32_t> prompt = full->tokenizer().encode("Once upon a time", true, false);
  const int n = 40;
  const int64_t held = int64_t(prompt.size()) + n;
  auto bounded = make(held);
  ASSERT_TRUE(bounded);
  EXPECT_EQ(full->kv_storage().num_blocks(), 2048 / 16);  // stories260K's context
  EXPECT_EQ(bounded->kv_storage().num_blocks(), (held + 15) / 16);
  EXPECT_EQ(bounded->context_length(), full->context_length());  // where generation stops is unchanged
  auto a = full->generate(prompt, greedy_ignoring_eos(n));
  auto b = bounded->generate(prompt, greedy_ignoring_eos(n));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(b->tokens.size(), size_t(n));
}

TEST(GeneratorArena, ABoundPastTheContextIsTheContext) {
  auto g = make(1 << 20, 64);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->kv_storage().num_blocks(), 4);
  EXPECT_EQ(g->context_length(), 64);
}

TEST(GeneratorArena, ARunPastItsBoundFailsCleanly) {
  auto g = make(20);  // two blocks: 32 tokens
  ASSERT_TRUE(g);
  const std::vector<int32_t> prompt = g->tokenizer().encode("Once upon a time", true, false);
  auto r = g->generate(prompt, greedy_ignoring_eos(100));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory) << r.status().to_string();
}

}  // namespace
}  // namespace kvserve
