// StreamDetokenizer: valid UTF-8 out of tokens that split characters.
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

bool is_valid_utf8(const std::string& s) { return utf8::sanitize(s) == s; }

// Streams `ids` one by one; every chunk must be valid UTF-8 on its own and the chunks must
// add up to the full decoding.
std::vector<std::string> stream(const Tokenizer& t, const std::vector<int32_t>& ids) {
  StreamDetokenizer d(t);
  std::vector<std::string> chunks;
  for (const int32_t id : ids) {
    chunks.push_back(d.push(id));
    EXPECT_TRUE(is_valid_utf8(chunks.back())) << "token " << id;
  }
  chunks.push_back(d.flush());
  return chunks;
}

std::string join(const std::vector<std::string>& chunks) {
  std::string s;
  for (const std::string& c : chunks) s += c;
  return s;
}

TEST(StreamDetokenizer, EmojiSplitAcrossSpmByteTokens) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  // U+1F999 (llama) has no token in the Llama-2 vocabulary: it is encoded as its four
  // byte-fallback tokens <0xF0><0x9F><0xA6><0x99>.
  const std::vector<int32_t> ids = t->encode(" this is \xF0\x9F\xA6\x99.cpp", false, false);
  const std::vector<int32_t> llama_bytes = {t->find_token("<0xF0>"), t->find_token("<0x9F>"),
                                            t->find_token("<0xA6>"), t->find_token("<0x99>")};
  const auto at = std::search(ids.begin(), ids.end(), llama_bytes.begin(), llama_bytes.end());
  ASSERT_NE(at, ids.end()) << ids_string(ids);
  const size_t first = static_cast<size_t>(at - ids.begin());

  const std::vector<std::string> chunks = stream(*t, ids);
  EXPECT_EQ(join(chunks), t->decode(ids));
  EXPECT_EQ(chunks[first], "");  // held back: 1 of 4 bytes
  EXPECT_EQ(chunks[first + 1], "");
  EXPECT_EQ(chunks[first + 2], "");
  EXPECT_EQ(chunks[first + 3], "\xF0\x9F\xA6\x99");  // complete with the 4th byte
  EXPECT_EQ(chunks.back(), "");                      // nothing left to flush
}

TEST(StreamDetokenizer, ByteLevelBpeSplitsCharacters) {
  const Tokenizer* t = vocab_tokenizer("gpt-2");
  ASSERT_NE(t, nullptr);
  const std::string text =
      "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B 🚀 (normal) 😶‍🌫️ нещо";
  const std::vector<int32_t> ids = t->encode(text, false, false);
  EXPECT_EQ(join(stream(*t, ids)), text);
}

TEST(StreamDetokenizer, FlushReplacesAnIncompleteTail) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  StreamDetokenizer d(*t);
  EXPECT_EQ(d.push(t->find_token("<0xF0>")), "");
  EXPECT_EQ(d.push(t->find_token("<0x9F>")), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // the truncated sequence is one U+FFFD
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDetokenizer, InvalidBytesComeOutAsReplacement) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  StreamDetokenizer d(*t);
  EXPECT_EQ(d.push(t->find_token("<0xFF>")), "\xEF\xBF\xBD");  // never valid in UTF-8
  EXPECT_EQ(d.push(t->find_token("<0xE2>")), "");
  // A lead byte followed by a non-continuation byte: replaced, then the ASCII goes through.
  EXPECT_EQ(d.push(t->find_token("<0x41>")), std::string(utf8::kReplacement) + "A");
}

TEST(StreamDetokenizer, ControlTokensRenderOnlyWhenAsked) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  StreamDetokenizer plain(*t);
  EXPECT_EQ(plain.push(t->eos_id()), "");
  StreamDetokenizer special(*t, true);
  EXPECT_EQ(special.push(t->eos_id()), "</s>");
}

// The tokenize --pieces view: one line per piece, nothing ambiguous, valid text untouched.
TEST(Utf8, EscapeForDisplay) {
  EXPECT_EQ(utf8::escape_for_display("a b\xC3\xA4\xE2\x96\x81"), "a b\xC3\xA4\xE2\x96\x81");
  EXPECT_EQ(utf8::escape_for_display("\n\r\t\\'"), "\\n\\r\\t\\\\\\'");
  EXPECT_EQ(utf8::escape_for_display(std::string("\0\x1B\x7F", 3)), "\\x00\\x1b\\x7f");
  EXPECT_EQ(utf8::escape_for_display("\xFF\xE2\x96"), "\\xff\\xe2\\x96");  // invalid, truncated
  EXPECT_EQ(utf8::escape_for_display("\xC2\x85"), "\\u0085");              // C1 control
  EXPECT_NE(utf8::escape_for_display("\\n"), utf8::escape_for_display("\n"));
  EXPECT_NE(utf8::escape_for_display("\\x0a"), utf8::escape_for_display("\n"));
}

TEST(Utf8, CheckSequence) {
  using utf8::SequenceCheck;
  EXPECT_EQ(utf8::check_sequence("a", 0).kind, SequenceCheck::kValid);
  EXPECT_EQ(utf8::check_sequence("\xC3\xA4", 0).length, 2u);
  EXPECT_EQ(utf8::check_sequence("\xF0\x9F", 0).kind, SequenceCheck::kIncomplete);
  EXPECT_EQ(utf8::check_sequence("\xC0\x80", 0).kind, SequenceCheck::kInvalid);          // overlong
  EXPECT_EQ(utf8::check_sequence("\xED\xA0\x80", 0).kind, SequenceCheck::kInvalid);      // surrogate
  EXPECT_EQ(utf8::check_sequence("\xF4\x90\x80\x80", 0).kind, SequenceCheck::kInvalid);  // > U+10FFFF
  EXPECT_EQ(utf8::sanitize("a\xE2\x82"
                           "b\x80"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

}  // namespace
}  // namespace kvserve::test
