// Tokenizer behaviour beyond the vectors: BOS/EOS, special-token parsing, pieces, EOG.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

TEST(Tokenizer, Stories260KStartsWithBos) {
  const Tokenizer* t = gguf_tokenizer(shared_path("models/stories260K.gguf"));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->model(), "llama");
  EXPECT_EQ(t->kind(), TokenizerKind::kSpm);
  EXPECT_EQ(t->n_vocab(), 512);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  const std::vector<int32_t> ids = t->encode("Once upon a time", true, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(t->decode(ids), " Once upon a time");
  const std::vector<int32_t> no_bos = t->encode("Once upon a time", false, false);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), no_bos);
  EXPECT_TRUE(t->is_eog(2));
  EXPECT_FALSE(t->is_eog(1));
}

TEST(Tokenizer, SpmMetadata) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->model(), "llama");
  EXPECT_EQ(t->n_vocab(), 32000);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->add_space_prefix());
  EXPECT_EQ(t->encode("", true, false), std::vector<int32_t>{1});  // BOS only, no "▁"
  EXPECT_TRUE(t->encode("", false, false).empty());
}

TEST(Tokenizer, SpmPieces) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->token_to_piece(15043), " Hello");  // "▁Hello"
  EXPECT_EQ(t->token_to_piece(13), "\n");         // <0x0A>
  EXPECT_EQ(t->token_to_piece(t->find_token("<0xF0>")), "\xF0");
  EXPECT_EQ(t->token_to_piece(2), "");  // </s> is a control token
  EXPECT_EQ(t->token_to_piece(2, true), "</s>");
  EXPECT_EQ(t->token_to_piece(0), "");  // <unk>
  EXPECT_EQ(t->token_to_piece(-1), "");
  EXPECT_EQ(t->token_to_piece(t->n_vocab()), "");
}

TEST(Tokenizer, SpmParseSpecial) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> parsed = t->encode("<s>Hello</s>", false, true);
  // Text after a special token gets the SentencePiece space prefix again.
  EXPECT_EQ(parsed, (std::vector<int32_t>{1, 15043, 2})) << ids_string(parsed);
  const std::vector<int32_t> literal = t->encode("<s>Hello</s>", false, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 1), 0) << ids_string(literal);
  EXPECT_EQ(t->decode(literal), " <s>Hello</s>");
}

TEST(Tokenizer, Phi3SpecialTokensSwallowFollowingWhitespace) {
  const Tokenizer* t = vocab_tokenizer("phi-3");
  ASSERT_NE(t, nullptr);
  const int32_t user = t->find_token("<|user|>");
  const int32_t end = t->find_token("<|end|>");
  ASSERT_GE(user, 0);
  ASSERT_GE(end, 0);
  EXPECT_TRUE(t->is_eog(end));
  EXPECT_TRUE(t->is_eog(t->eos_id()));
  EXPECT_TRUE(t->is_eog(t->find_token("<|endoftext|>")));
  EXPECT_FALSE(t->is_eog(user));
  const std::vector<int32_t> a = t->encode("<|user|>\nHi<|end|>\n", false, true);
  const std::vector<int32_t> b = t->encode("<|user|>Hi<|end|>", false, true);
  EXPECT_EQ(a, b) << ids_string(a) << " vs " << ids_string(b);
  EXPECT_EQ(a.front(), user);
  EXPECT_EQ(a.back(), end);
}

TEST(Tokenizer, BpeParseSpecialAndEog) {
  const Tokenizer* t = vocab_tokenizer("gpt-2");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->model(), "gpt2");
  EXPECT_EQ(t->pre(), "gpt-2");
  EXPECT_EQ(t->kind(), TokenizerKind::kBpe);
  const int32_t eot = t->find_token("<|endoftext|>");
  ASSERT_EQ(eot, 50256);
  EXPECT_TRUE(t->is_eog(eot));
  EXPECT_TRUE(t->is_control(eot));
  EXPECT_FALSE(t->is_eog(t->find_token("Hello")));
  const std::vector<int32_t> parsed = t->encode("Hello<|endoftext|> world", false, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{15496, eot, 995})) << ids_string(parsed);
  const std::vector<int32_t> literal = t->encode("Hello<|endoftext|> world", false, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), eot), 0);
  EXPECT_EQ(t->decode(literal), "Hello<|endoftext|> world");
  EXPECT_EQ(t->token_to_piece(995), " world");  // "Ġworld"
  EXPECT_EQ(t->token_to_piece(eot), "");
  EXPECT_EQ(t->token_to_piece(eot, true), "<|endoftext|>");
}

TEST(Tokenizer, BpeAddSpecialFollowsMetadata) {
  const Tokenizer* t = vocab_tokenizer("gpt-2");
  ASSERT_NE(t, nullptr);
  std::vector<int32_t> expected;
  if (t->add_bos()) expected.push_back(t->bos_id());
  expected.push_back(15496);
  if (t->add_eos()) expected.push_back(t->eos_id());
  EXPECT_EQ(t->encode("Hello", true, false), expected);
}

TEST(Tokenizer, WordPieceAddsClsAndSep) {
  const Tokenizer* t = vocab_tokenizer("bert-bge");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), TokenizerKind::kWordPiece);
  const std::vector<int32_t> ids = t->encode("Hello world", true, false);
  ASSERT_EQ(ids.size(), 4u) << ids_string(ids);
  EXPECT_EQ(ids.front(), 101);  // [CLS]
  EXPECT_EQ(ids.back(), 102);   // [SEP]
}

// Literal ranges (a chat message's content): control-token text inside them stays text, the
// markup around them is parsed; with no special text inside, the ids equal a plain parse.
TEST(Tokenizer, LiteralRangesKeepControlTokensAsText) {
  const Tokenizer* t = vocab_tokenizer("llama-spm");
  ASSERT_NE(t, nullptr);
  const std::string text = "[INST] a</s><s>b [/INST] ok</s>";
  const uint32_t begin = 7, end = 16;  // "a</s><s>b"
  ASSERT_EQ(text.substr(begin, end - begin), "a</s><s>b");
  const std::vector<TextRange> content = {{begin, end}};
  const std::vector<int32_t> ids = t->encode(text, true, true, content);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t->eos_id()), 1) << ids_string(ids);  // the markup's </s> only
  EXPECT_EQ(ids.back(), t->eos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t->bos_id()), 1) << ids_string(ids);  // add_special's BOS only
  EXPECT_NE(t->decode(ids).find("a</s><s>b"), std::string::npos) << t->decode(ids);
  // A range that only touches a special token (ends where it starts) does not stop it.
  const std::string clean = "[INST] hello [/INST] ok</s>";
  const std::vector<TextRange> hello = {{7, 12}};
  EXPECT_EQ(t->encode(clean, true, true, hello), t->encode(clean, true, true));
  // Control tokens in a literal range of a BPE vocabulary too (phi-3's <|end|>), user text left and right.
  const Tokenizer* phi = vocab_tokenizer("phi-3");
  ASSERT_NE(phi, nullptr);
  const std::string chat = "<|user|>\nx<|end|>y<|end|>\n";
  const std::vector<TextRange> x = {{9, 18}};  // "x<|end|>y"
  const std::vector<int32_t> p = phi->encode(chat, false, true, x);
  EXPECT_EQ(std::count(p.begin(), p.end(), phi->find_token("<|end|>")), 1) << ids_string(p);
  EXPECT_EQ(p.front(), phi->find_token("<|user|>"));
}

TEST(Tokenizer, UserDefinedTokensAreMatchedWithoutParseSpecial) {
  // MPT (GPT-NeoX vocabulary) has user-defined runs of spaces; HF matches them before the
  // pre-tokenizer, whatever parse_special says.
  const Tokenizer* t = vocab_tokenizer("mpt");
  ASSERT_NE(t, nullptr);
  const int32_t three_spaces = t->find_token("   ");
  ASSERT_GE(three_spaces, 0);
  ASSERT_FALSE(t->is_control(three_spaces));
  const std::vector<int32_t> ids = t->encode("a   b", false, false);
  EXPECT_NE(std::find(ids.begin(), ids.end(), three_spaces), ids.end()) << ids_string(ids);
}

TEST(Tokenizer, LongInputSpansManyPieces) {
  const Tokenizer* t = vocab_tokenizer("gpt-2");
  ASSERT_NE(t, nullptr);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "The quick brown fox " + std::to_string(i) + "\n";
  EXPECT_EQ(t->decode(t->encode(text, false, false)), text);
}

TEST(Tokenizer, ConcurrentEncodeIsSafe) {
  const Tokenizer* t = vocab_tokenizer("deepseek-llm");
  ASSERT_NE(t, nullptr);
  const std::vector<VocabCase> cases = read_vocab_cases("deepseek-llm");
  std::vector<int> num_ok(4, 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < num_ok.size(); ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep) {
        for (const VocabCase& c : cases) num_ok[k] += t->encode(c.text, false, false) == c.ids;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const int n : num_ok) EXPECT_EQ(n, static_cast<int>(5 * cases.size()));
}

}  // namespace
}  // namespace kvserve::test
