// JsonConstraint's mask (a trie walk, and inside strings a precomputed mask of string runs) equals
// the plain definition, token by token, on a real 32,000-token vocabulary: token i is allowed
// exactly when it is not excluded and the recognizer, in the current state, accepts its bytes.
#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

std::vector<uint8_t> by_definition(const ConstraintVocab& v, const JsonPrefix& state) {
  std::vector<uint8_t> a(v.pieces.size(), 0);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    JsonPrefix s = state;
    a[i] = v.excluded[i] == 0 && s.feed(v.pieces[i]);
  }
  return a;
}

TEST(JsonConstraint, MaskEqualsTheDefinitionOnARealVocabulary) {
  auto f = GgufFile::open(std::string(KVS_SHARED_DIR) + "/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto tok = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const ConstraintVocab v = ConstraintVocab::from(**tok);
  ASSERT_EQ(v.pieces.size(), 32000u);
  // The states after every prefix of these texts: structure, keys and values, escapes, numbers,
  // literals, a multi-byte character cut in the middle, nesting, the closed object.
  const std::string texts[] = {
      "{\"key\": \"va\\\"lue \\u00e9\xC3\xA9\", \"n\": -12.5e+3, \"t\": true, \"a\": [null, {}, [1]]}",
      "{\"\xE2\x82\xAC\":{\"k\":\"\\n\"},\"z\":0}",
  };
  std::vector<uint8_t> mask;
  int states = 0;
  for (const std::string& text : texts) {
    JsonConstraint c(v);
    JsonPrefix state;
    for (size_t i = 0; i <= text.size(); ++i) {
      // Bring the constraint to `state` through single-byte tokens where the vocabulary has them
      // (byte tokens do), comparing at every step.
      ASSERT_EQ(c.allowed(&mask), true) << i;
      ASSERT_EQ(mask, by_definition(v, state)) << "after " << text.substr(0, i);
      ++states;
      if (i == text.size()) break;
      state.feed_byte(uint8_t(text[i]));
      int32_t byte_token = -1;
      for (size_t id = 0; id < v.pieces.size() && byte_token < 0; ++id)
        if (v.excluded[id] == 0 && v.pieces[id] == text.substr(i, 1)) byte_token = int32_t(id);
      ASSERT_GE(byte_token, 0) << "no token for byte " << int(uint8_t(text[i]));
      c.accept(byte_token);
    }
    EXPECT_TRUE(c.complete());
  }
  EXPECT_GT(states, 100);
}

}  // namespace
}  // namespace kvserve
