// Once loaded, a model reads nothing from its file (model.h): the same logits after the file is
// overwritten in place with another model's bytes, and after it is truncated (reading a truncated
// mapping raises SIGBUS), whichever encoding and whether or not the weights were repacked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "model/model.h"
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
  EXPECT_GT((*m)->copied_bytes(), 0u);  // at least the token embedding
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

}  // namespace
}  // namespace kvserve
