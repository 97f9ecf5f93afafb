// The SentencePiece merger on its own: word-by-word merging equals whole-text merging.
#include "tokenizer/spm.h"

#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

// The Llama-2 vocabulary as a bare Vocab, read through the GGUF reader.
Vocab llama2_vocab() {
  Expected<std::shared_ptr<GgufFile>> f = GgufFile::open(vocab_path("llama-spm"));
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return Vocab({}, {}, {});
  const GgufValue* tokens = (*f)->find("tokenizer.ggml.tokens");
  const GgufValue* scores = (*f)->find("tokenizer.ggml.scores");
  const GgufValue* types = (*f)->find("tokenizer.ggml.token_type");
  EXPECT_TRUE(tokens && scores && types);
  if (!tokens || !scores || !types) return Vocab({}, {}, {});
  return Vocab(tokens->arr_str, scores->arr_float, types->arr_int);
}

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  return out;
}

TEST(SpmEncoder, WordByWordEqualsWholeText) {
  const Vocab vocab = llama2_vocab();
  ASSERT_EQ(vocab.size(), 32000);
  ASSERT_TRUE(SpmEncoder::vocab_splits_before_spaces(vocab));
  const SpmEncoder by_word(vocab, 0, true);
  const SpmEncoder whole(vocab, 0, false);
  std::string all;
  for (const VocabCase& c : read_vocab_cases("llama-spm")) {
    const std::string text = escaped(" " + c.text);
    std::vector<int32_t> a, b;
    by_word.encode(text, a);
    whole.encode(text, b);
    EXPECT_EQ(a, b) << c.text;
    EXPECT_EQ(a, c.text.empty() ? std::vector<int32_t>{29871} : c.ids) << c.text;
    all += text;
  }
  std::vector<int32_t> a, b;
  by_word.encode(all, a);
  whole.encode(all, b);
  EXPECT_EQ(a, b);
}

TEST(SpmEncoder, VocabWithMidWordSpaceDisablesWordSplit) {
  const Vocab vocab({"a", "\xE2\x96\x81", "a\xE2\x96\x81"}, {}, {});
  EXPECT_FALSE(SpmEncoder::vocab_splits_before_spaces(vocab));
  const SpmEncoder enc(vocab, -1);
  std::vector<int32_t> ids;
  enc.encode("a\xE2\x96\x81", ids);
  EXPECT_EQ(ids, std::vector<int32_t>{2});  // merged across the space
}

TEST(SpmEncoder, ByteFallback) {
  const Vocab vocab({"<unk>", "<0x41>", "b"}, {}, {2, 6, 1});
  const SpmEncoder enc(vocab, 0);
  EXPECT_EQ(enc.byte_token('A'), 1);
  EXPECT_EQ(enc.byte_token('B'), 0);  // neither <0x42> nor "B": unknown
  std::vector<int32_t> ids;
  enc.encode("AbB", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0}));
}

}  // namespace
}  // namespace kvserve::test
