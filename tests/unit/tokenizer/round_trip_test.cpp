// decode(encode(x)) gives x back, on every test-vector text.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

void expect_round_trips(const Tokenizer& t, const std::string& vectors) {
  for (const VocabCase& c : read_vocab_cases(vectors)) {
    const std::vector<int32_t> ids = t.encode(c.text, false, false);
    EXPECT_EQ(t.decode(ids), c.text) << vectors << ": ids " << ids_string(ids);
  }
}

TEST(RoundTrip, ByteLevelBpe) {
  for (const char* name :
       {"gpt-2", "mpt", "falcon", "deepseek-coder", "deepseek-llm", "refact", "starcoder"}) {
    SCOPED_TRACE(name);
    const Tokenizer* t = vocab_tokenizer(name);
    ASSERT_NE(t, nullptr);
    EXPECT_FALSE(t->add_space_prefix());
    expect_round_trips(*t, name);
  }
}

TEST(RoundTrip, Llama3FromFiles) {
  const Tokenizer* t = llama3_files_tokenizer();
  ASSERT_NE(t, nullptr);
  expect_round_trips(*t, "llama-bpe");
}

// SentencePiece prefixes a space, so the plain decoding is " " + x; stripping the prefix
// space gives x itself.
TEST(RoundTrip, SentencePieceWithPrefixSpace) {
  for (const char* name : {"llama-spm", "phi-3"}) {
    SCOPED_TRACE(name);
    const Tokenizer* t = vocab_tokenizer(name);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->add_space_prefix());
    DecodeOptions strip;
    strip.strip_space_prefix = true;
    for (const VocabCase& c : read_vocab_cases(name)) {
      const std::vector<int32_t> ids = t->encode(c.text, false, false);
      const std::string expected = c.text.empty() ? "" : " " + c.text;
      EXPECT_EQ(t->decode(ids), expected) << ids_string(ids);
      EXPECT_EQ(t->decode(ids, strip), c.text) << ids_string(ids);
    }
  }
}

TEST(RoundTrip, SentencePieceWithBosKeepsPrefixSpaceUnlessStripped) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> ids = t->encode("Hello world", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), t->bos_id());
  EXPECT_EQ(t->decode(ids), " Hello world");  // BOS renders as nothing
  DecodeOptions o;
  o.strip_space_prefix = true;
  EXPECT_EQ(t->decode(ids, o), "Hello world");
  o.special = true;
  EXPECT_EQ(t->decode(ids, o), "<s>Hello world");  // the space goes, not the BOS text
}

}  // namespace
}  // namespace kvserve::test
