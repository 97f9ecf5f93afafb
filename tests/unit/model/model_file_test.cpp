// Once loaded, a model reads nothing from its file (model.h): the same logits after the file is
// overwritten in place with another model's bytes, and after it is truncated (reading a truncated
// mapping raises SIGBUS), whichever encoding and whether or not the weights were repacked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "kernels/matmul.h"
#include "kernels/vec_dot.h"
#include "model/model.h"
#include "model/synth.h"
#include "model_test_util.h"

namespace kvserve {
namespace {

using testing::TempDir;

void expect_file_independent(const std::string& rel) {
  SCOPED_TRACE(rel);
  TempDir dir;
  const std::string path = dir.file("model.gguf");
  std::filesystem::copy_file(testing::shared_path(rel), path);
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_GT((*m)->copied_bytes(), 0u);  // at least the token embedding (the vocabularies' 512 and
                                        // 50,257 rows are not whole packed groups)
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  auto before = testing::model_logits(**m, tokens);
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  std::filesystem::copy_file(testing::shared_path("models/stories260K.gguf"), path,
                             std::filesystem::copy_options::overwrite_existing);  // in place: same inode
  auto replaced = testing::model_logits(**m, tokens);
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(*replaced, *before);
  std::filesystem::resize_file(path, 0);
  auto truncated = testing::model_logits(**m, tokens);
  ASSERT_TRUE(truncated.ok());
  EXPECT_EQ(*truncated, *before);
}

TEST(ModelFile, InferenceReadsNothingFromTheFileAfterLoad) {
  for (const char* rel : {"models/tiny/tiny-llama-q8_0.gguf", "models/tiny/tiny-llama-q4_k_m.gguf",
                          "models/tiny/tiny-qwen2-q8_0.gguf"})
    expect_file_independent(rel);
}

TEST(ModelFile, AlsoWithoutRepacking) {
  ::setenv("KVSERVE_REPACK", "0", 1);
  expect_file_independent("models/tiny/tiny-llama-q5_k_m.gguf");
  ::unsetenv("KVSERVE_REPACK");
}

// A tied embedding whose output matrix is packed (a vocabulary of whole 16-row groups, q8_0) is
// not copied: its rows come from the packed output copy, with the same logits as when nothing is
// repacked (f32 activations meet the same codes; only the GEMM's summation order differs) and
// still nothing read from the file.
TEST(ModelFile, TiedEmbeddingRowsComeFromThePackedOutput) {
  TempDir dir;
  const SynthSpec s{.name = "tiny-tied",
                    .n_embd = 64,
                    .n_layer = 1,
                    .n_head = 2,
                    .n_head_kv = 1,
                    .n_ff = 128,
                    .n_ctx = 64,
                    .tied_output = true};
  SynthOptions o;
  o.vocab_path = testing::default_vocab();  // 32,000 tokens
  auto scheme = parse_quant_scheme("q8_0");
  ASSERT_TRUE(scheme.ok());
  const std::string path = dir.file("model.gguf");
  ASSERT_TRUE(synth_model(s, *scheme, o, path).ok());
  ::setenv("KVSERVE_REPACK", "0", 1);
  auto plain = Model::load(path);
  ::unsetenv("KVSERVE_REPACK");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // A table without a packed layout for q8_0 (KVSERVE_KERNELS=scalar) keeps the file's rows, so
  // the embedding rows are copied as without repacking: nothing of this test's subject to check.
  if (packed_weight_bytes(active_kernels(), (*m)->weights().output) == 0)
    GTEST_SKIP() << "the kernel table in use (" << active_kernels().name << ") packs no q8_0";
  const size_t embd_bytes = (*m)->weights().tok_embd.row_bytes * 32000;
  EXPECT_EQ((*plain)->copied_bytes() >= embd_bytes, true);
  EXPECT_LT((*m)->copied_bytes(), embd_bytes);
  EXPECT_EQ((*m)->weights().tok_embd.packed, (*m)->weights().output.packed);
  const std::vector<int32_t> tokens = {1, 31999, 16, 15, 4000};
  auto want = testing::model_logits(**plain, tokens);
  auto got = testing::model_logits(**m, tokens);
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(want->size(), got->size());
  for (size_t i = 0; i < got->size(); ++i) ASSERT_NEAR((*got)[i], (*want)[i], 1e-4f) << i;
  std::filesystem::resize_file(path, 0);
  auto truncated = testing::model_logits(**m, tokens);
  ASSERT_TRUE(truncated.ok());
  EXPECT_EQ(*truncated, *got);
}

}  // namespace
}  // namespace kvserve
