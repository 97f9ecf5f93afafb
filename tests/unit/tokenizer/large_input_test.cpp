// Large inputs: encoding 1 MB of mixed text completes and round-trips. The time is printed for
// information only; speed targets live in benchmarks, never in timed tests (machines are noisy).
#include <gtest/gtest.h>

#include <chrono>

#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

// About 1 MB built from the vector texts (English, code-ish text, Cyrillic, Khmer, CJK, emoji).
std::string megabyte_of_text() {
  std::string unit;
  for (const VocabCase& c : read_vocab_cases("gpt-2")) unit += c.text + "\n";
  std::string text;
  while (text.size() < (1u << 20)) text += unit;
  return text;
}

void expect_large_input_ok(const Tokenizer* t, const std::string& name) {
  ASSERT_NE(t, nullptr);
  static const std::string text = megabyte_of_text();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t->encode(text, false, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ speed    ] " << name << ": " << text.size() << " bytes -> " << ids.size() << " tokens in "
            << seconds * 1e3 << " ms\n";
  EXPECT_GT(ids.size(), text.size() / 16) << name;
  if (name != "bert-bge") {  // WordPiece lower-cases, so only the others round-trip exactly
    std::string back = t->decode(ids);
    if (!back.empty() && back[0] == ' ' && text[0] != ' ') back.erase(0, 1);  // SentencePiece prefix
    EXPECT_TRUE(back == text) << name << ": 1 MB round trip differs";
  }
}

TEST(TokenizerLargeInput, OneMegabyte) {
  expect_large_input_ok(vocab_tokenizer("llama-spm"), "llama-spm");
  expect_large_input_ok(vocab_tokenizer("gpt-2"), "gpt-2");
  expect_large_input_ok(vocab_tokenizer("deepseek-llm"), "deepseek-llm");
  expect_large_input_ok(vocab_tokenizer("bert-bge"), "bert-bge");
  expect_large_input_ok(llama3_files_tokenizer(), "llama-bpe");
}

}  // namespace
}  // namespace kvserve::test
