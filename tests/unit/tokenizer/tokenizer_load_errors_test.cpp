// Loading errors name the file and the metadata key.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "gguf/gguf_writer.h"
#include "tokenizer_test_util.h"

namespace kvserve::test {
namespace {

// Writes a vocab-only GGUF built by `fill` and tries to load a tokenizer from it.
Status load_written(const std::string& name, const std::function<void(GgufWriter&)>& fill) {
  GgufWriter w;
  fill(w);
  const std::string path = (std::filesystem::temp_directory_path() / ("kvs_tok_" + name + ".gguf")).string();
  const Status written = w.write_file(path);
  if (!written.ok()) return written;
  Expected<std::shared_ptr<GgufFile>> f = GgufFile::open(path);
  std::filesystem::remove(path);
  if (!f.ok()) return f.status();
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(**f);
  return t.ok() ? Status() : t.status();
}

void add_small_spm(GgufWriter& w) {
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_array_string("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>",
                                               "\xE2\x96\x81"
                                               "a",
                                               "a"});
  w.add_array_float("tokenizer.ggml.scores", GgufValueType::FLOAT32, {0, 0, 0, -1, -2});
  w.add_array_int("tokenizer.ggml.token_type", GgufValueType::INT32, {2, 3, 3, 1, 1});
}

void expect_error_naming(const Status& s, const std::string& file, const std::string& key) {
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(file), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
}

TEST(TokenizerLoad, SmallSpmLoads) { EXPECT_TRUE(load_written("small", add_small_spm).ok()); }

TEST(TokenizerLoad, MissingModelKey) {
  const Status s = load_written("no_model", [](GgufWriter& w) { w.add_string("general.name", "x"); });
  expect_error_naming(s, "kvs_tok_no_model.gguf", "tokenizer.ggml.model");
}

TEST(TokenizerLoad, MissingTokens) {
  const Status s =
      load_written("no_tokens", [](GgufWriter& w) { w.add_string("tokenizer.ggml.model", "llama"); });
  expect_error_naming(s, "kvs_tok_no_tokens.gguf", "tokenizer.ggml.tokens");
}

TEST(TokenizerLoad, WrongTypes) {
  expect_error_naming(load_written("bad_tokens",
                                   [](GgufWriter& w) {
                                     w.add_string("tokenizer.ggml.model", "llama");
                                     w.add_string("tokenizer.ggml.tokens", "a");
                                   }),
                      "kvs_tok_bad_tokens.gguf", "tokenizer.ggml.tokens");
  expect_error_naming(load_written("bad_bos",
                                   [](GgufWriter& w) {
                                     add_small_spm(w);
                                     w.add_string("tokenizer.ggml.bos_token_id", "1");
                                   }),
                      "kvs_tok_bad_bos.gguf", "tokenizer.ggml.bos_token_id");
  expect_error_naming(load_written("short_scores",
                                   [](GgufWriter& w) {
                                     w.add_string("tokenizer.ggml.model", "llama");
                                     w.add_array_string("tokenizer.ggml.tokens", {"a", "b"});
                                     w.add_array_float("tokenizer.ggml.scores", GgufValueType::FLOAT32, {0});
                                   }),
                      "kvs_tok_short_scores.gguf", "tokenizer.ggml.scores");
}

TEST(TokenizerLoad, UnknownModelAndPre) {
  const Status model = load_written("bad_model", [](GgufWriter& w) {
    w.add_string("tokenizer.ggml.model", "rwkv");
    w.add_array_string("tokenizer.ggml.tokens", {"a"});
  });
  expect_error_naming(model, "kvs_tok_bad_model.gguf", "tokenizer.ggml.model");
  EXPECT_EQ(model.code(), StatusCode::kUnsupported);

  const Status pre = load_written("bad_pre", [](GgufWriter& w) {
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "no-such-pre");
    w.add_array_string("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.add_array_string("tokenizer.ggml.merges", {"a b"});
  });
  expect_error_naming(pre, "kvs_tok_bad_pre.gguf", "tokenizer.ggml.pre");
}

TEST(TokenizerLoad, Gpt2NeedsMerges) {
  const Status s = load_written("no_merges", [](GgufWriter& w) {
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "gpt-2");
    w.add_array_string("tokenizer.ggml.tokens", {"a"});
  });
  expect_error_naming(s, "kvs_tok_no_merges.gguf", "tokenizer.ggml.merges");
}

TEST(TokenizerLoad, AddBosWithoutBosToken) {
  const Status s = load_written("no_bos", [](GgufWriter& w) {
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "gpt-2");
    w.add_array_string("tokenizer.ggml.tokens", {"a", "b", "ab"});  // default BOS 11 is out of range
    w.add_array_string("tokenizer.ggml.merges", {"a b"});
    w.add_bool("tokenizer.ggml.add_bos_token", true);
  });
  expect_error_naming(s, "kvs_tok_no_bos.gguf", "tokenizer.ggml.add_bos_token");
}

TEST(TokenizerLoad, SmallBpeMergesByRank) {
  TokenizerSpec spec;
  spec.source = "inline";
  spec.model = "gpt2";
  spec.pre = "gpt-2";
  spec.tokens = {"a", "b", "c", "ab", "bc", "abc"};
  spec.merges = {"b c", "a b", "a bc"};  // "bc" outranks "ab", so "abc" = a + bc -> abc
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_spec(spec);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abc", false, false), std::vector<int32_t>{5});
  EXPECT_EQ((*t)->encode("ab", false, false), std::vector<int32_t>{3});
  EXPECT_EQ((*t)->encode("ca", false, false), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ((*t)->bos_id(), -1);  // default 11 is out of range
  EXPECT_FALSE((*t)->is_eog(0));
}

TEST(TokenizerLoad, EogFromMetadataAndText) {
  TokenizerSpec spec;
  spec.source = "inline";
  spec.model = "llama";
  spec.tokens = {"<unk>",
                 "<s>",
                 "</s>",
                 "<|im_end|>",
                 "<|stop|>",
                 "\xE2\x96\x81"
                 "a"};
  spec.token_types = {2, 3, 3, 1, 3, 1};  // <|im_end|> typed normal by a careless converter
  spec.eot_id = 4;
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_spec(spec);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.eot_id(), 4);
  EXPECT_TRUE(tok.is_eog(2));  // EOS
  EXPECT_TRUE(tok.is_eog(3));  // known end-of-turn text
  EXPECT_TRUE(tok.is_eog(4));  // tokenizer.ggml.eot_token_id
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_FALSE(tok.is_eog(5));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(99));
  // Turn-ending tokens become control tokens: parsed only with parse_special, hidden in text.
  EXPECT_TRUE(tok.is_control(3));
  EXPECT_EQ(tok.encode("<|im_end|>", false, true), std::vector<int32_t>{3});
  EXPECT_EQ(tok.token_to_piece(3), "");
}

}  // namespace
}  // namespace kvserve::test
