// llama.cpp's tokenizer test vectors: every text of every vocabulary must give exactly the
// reference ids.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

void expect_all_vectors_pass(const std::string& name) {
  const Tokenizer* t = vocab_tokenizer(name);
  ASSERT_NE(t, nullptr);
  const size_t num_cases = read_vocab_cases(name).size();
  const size_t num_ok = check_vocab_cases(*t, name);
  EXPECT_EQ(num_ok, num_cases);
  EXPECT_EQ(check_vocab_cases(*t, name, /*parse_special=*/true), num_cases);
  std::cout << "[ vectors  ] " << name << ": " << num_ok << "/" << num_cases << " texts match\n";
}

TEST(VocabVectors, LlamaSpm) { expect_all_vectors_pass("llama-spm"); }
TEST(VocabVectors, Phi3) { expect_all_vectors_pass("phi-3"); }
TEST(VocabVectors, Gpt2) { expect_all_vectors_pass("gpt-2"); }
TEST(VocabVectors, Mpt) { expect_all_vectors_pass("mpt"); }
TEST(VocabVectors, Falcon) { expect_all_vectors_pass("falcon"); }
TEST(VocabVectors, DeepseekCoder) { expect_all_vectors_pass("deepseek-coder"); }
TEST(VocabVectors, DeepseekLlm) { expect_all_vectors_pass("deepseek-llm"); }
TEST(VocabVectors, Refact) { expect_all_vectors_pass("refact"); }
TEST(VocabVectors, Starcoder) { expect_all_vectors_pass("starcoder"); }
TEST(VocabVectors, BertBge) { expect_all_vectors_pass("bert-bge"); }

// Llama-3 pre-tokenizer with the Llama-3.2 vocabulary read from encoder.json + vocab.bpe.
TEST(VocabVectors, LlamaBpeFromFiles) {
  const Tokenizer* t = llama3_files_tokenizer();
  ASSERT_NE(t, nullptr);
  const size_t num_cases = read_vocab_cases("llama-bpe").size();
  const size_t num_ok = check_vocab_cases(*t, "llama-bpe");
  EXPECT_EQ(num_ok, num_cases);
  EXPECT_EQ(check_vocab_cases(*t, "llama-bpe", /*parse_special=*/true), num_cases);
  std::cout << "[ vectors  ] llama-bpe (encoder.json): " << num_ok << "/" << num_cases << " texts match\n";
}

}  // namespace
}  // namespace kvserve::test
