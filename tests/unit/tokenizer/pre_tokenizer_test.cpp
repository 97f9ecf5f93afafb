// Pre-tokenizer regex lists, the GPT-2 byte mapping and the encoder.json parser.
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_unicode.h"
#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  const std::optional<PreTokenizerSpec> spec = find_pre_tokenizer(pre);
  EXPECT_TRUE(spec.has_value()) << pre;
  if (!spec) return {};
  Expected<RegexSplitter> s = RegexSplitter::create(spec->regexes);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  std::vector<TextPiece> pieces;
  s->split(text, pieces);
  std::vector<std::string> out;
  for (const TextPiece& p : pieces) out.push_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2KeepsTheSpaceBeforeAWord) {
  EXPECT_EQ(split("gpt-2", "Hello world  foo's 42!!"),
            (Pieces{"Hello", " world", " ", " foo", "'s", " 42", "!!"}));
  EXPECT_EQ(split("gpt-2", "a\n\n  b"), (Pieces{"a", "\n\n ", " b"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(split("llama-bpe", "1234567 I'M ok\n\n"), (Pieces{"123", "456", "7", " I", "'M", " ok", "\n\n"}));
}

TEST(PreTokenizer, StarcoderSplitsEveryDigit) {
  EXPECT_EQ(split("starcoder", "x 123"), (Pieces{"x", " ", "1", "2", "3"}));
}

TEST(PreTokenizer, DeepseekCoderIsolatesNewlinesAndCjk) {
  EXPECT_EQ(split("deepseek-coder", "ab\ncd 我想"), (Pieces{"ab", "\n", "cd", " ", "我想"}));
}

TEST(PreTokenizer, FalconCutsPunctuationFirst) {
  EXPECT_EQ(split("falcon", "a+=b 12345"), (Pieces{"a", "+=", "b", " ", "123", "45"}));
}

TEST(PreTokenizer, PiecesCoverInvalidUtf8) {
  const std::string text = "ab\xFF\xC3 cd\xE2\x82";
  const Pieces pieces = split("llama-bpe", text);
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, KnownNames) {
  // "gpt-neox" is a model, not a pre-tokenizer name: such files have no tokenizer.ggml.pre.
  for (const char* name :
       {"",       "default", "gpt-2",     "llama-bpe", "llama3",   "qwen2", "deepseek-llm", "deepseek-coder",
        "falcon", "mpt",     "starcoder", "refact",    "gpt-neox", "phi-2", "olmo",         "command-r",
        "smollm", "dbrx",    "poro-chat", "tekken",    "gpt-4o",   "qwen35"}) {
    SCOPED_TRACE(name);
    const std::optional<PreTokenizerSpec> spec = find_pre_tokenizer(name);
    if (std::string(name) == "gpt-neox") {
      EXPECT_FALSE(spec.has_value());
      continue;
    }
    ASSERT_TRUE(spec.has_value());
    Expected<RegexSplitter> s = RegexSplitter::create(spec->regexes);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
  }
}

TEST(PreTokenizer, BadRegexIsAnError) {
  Expected<RegexSplitter> s = RegexSplitter::create({"[a-"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("[a-"), std::string::npos);
}

TEST(ByteUnicode, Gpt2Mapping) {
  EXPECT_EQ(byte_to_unicode_utf8(' '), "\xC4\xA0");   // 'Ġ' U+0120
  EXPECT_EQ(byte_to_unicode_utf8('\n'), "\xC4\x8A");  // 'Ċ' U+010A
  EXPECT_EQ(byte_to_unicode_utf8('a'), "a");
  std::string all;
  std::string mapped;
  for (int b = 0; b < 256; ++b) {
    all.push_back(static_cast<char>(b));
    mapped += byte_to_unicode_utf8(static_cast<uint8_t>(b));
  }
  EXPECT_EQ(unicode_to_bytes(mapped), all);
  EXPECT_EQ(unicode_to_bytes("\xE4\xBD\xA0"), "\xE4\xBD\xA0");  // unmapped: passed through
}

TEST(BpeFiles, EncoderJsonEscapes) {
  std::vector<std::string> tokens;
  ASSERT_TRUE(parse_encoder_json(R"({"a": 0, "\u0120b\"": 2, "\ud83d\ude00": 1})", "x.json", tokens).ok());
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[0], "a");
  EXPECT_EQ(tokens[1], "\xF0\x9F\x98\x80");
  EXPECT_EQ(tokens[2], std::string("\xC4\xA0") + "b\"");
  const Status bad = parse_encoder_json(R"({"a": 0, "b" 1})", "x.json", tokens);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("x.json"), std::string::npos);
}

TEST(BpeFiles, MissingFileNamesIt) {
  Expected<TokenizerSpec> s = read_bpe_files("/nonexistent/encoder.json", "/nonexistent/vocab.bpe", "gpt-2");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/encoder.json"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::test
