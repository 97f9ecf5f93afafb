// Reads the real GGUF fixtures in ../shared/models and checks facts documented in
// shared/models/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "gguf_test_util.h"

namespace kvserve {
namespace {

using namespace gguf_test;
namespace fs = std::filesystem;

std::shared_ptr<GgufFile> open_or_fail(const std::string& path) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : nullptr;
}

// Every tensor's bytes lie inside the file, after the data offset, and no two overlap.
void expect_tensor_layout_sane(const GgufFile& f) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.nbytes, t.row_bytes() * size_t(t.nrows()));
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    ASSERT_NE(t.data, nullptr);
    uint64_t start = f.data_offset() + t.offset;
    EXPECT_LE(start + t.nbytes, f.file_size());
    ranges.emplace_back(start, start + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) EXPECT_LE(ranges[k - 1].second, ranges[k].first);
}

TEST(GgufSharedModels, Stories260KMetadata) {
  auto f = open_or_fail(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->file_size(), 1185376u);
  EXPECT_EQ(f->get_string_or("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_int_or("llama.block_count", -1), 5);
  EXPECT_EQ(f->get_int_or("llama.embedding_length", -1), 64);
  EXPECT_EQ(f->get_int_or("llama.feed_forward_length", -1), 172);
  EXPECT_EQ(f->get_int_or("llama.attention.head_count", -1), 8);
  EXPECT_EQ(f->get_int_or("llama.attention.head_count_kv", -1), 4);
  EXPECT_EQ(f->get_int_or("llama.rope.dimension_count", -1), 8);
  EXPECT_EQ(f->get_int_or("llama.context_length", -1), 2048);
  EXPECT_NEAR(f->get_float_or("llama.attention.layer_norm_rms_epsilon", 0), 1e-5, 1e-12);
  EXPECT_EQ(f->get_string_or("tokenizer.ggml.model", ""), "llama");
  EXPECT_EQ(f->get_int_or("tokenizer.ggml.bos_token_id", -1), 1);
  EXPECT_EQ(f->get_int_or("tokenizer.ggml.eos_token_id", -1), 2);
  EXPECT_EQ(f->find("llama.block_count")->type, GgufValueType::UINT32);

  const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->type, GgufValueType::ARRAY);
  EXPECT_EQ(tokens->elem_type, GgufValueType::STRING);
  ASSERT_EQ(tokens->array_size(), 512u);
  EXPECT_EQ(tokens->arr_str[0], "<unk>");
  EXPECT_EQ(tokens->arr_str[1], "<s>");
  EXPECT_EQ(tokens->arr_str[2], "</s>");
  EXPECT_EQ(tokens->arr_str[3], "<0x00>");
  EXPECT_EQ(tokens->arr_str[258], "<0xFF>");

  const GgufValue* scores = f->find("tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->elem_type, GgufValueType::FLOAT32);
  EXPECT_EQ(scores->arr_float.size(), 512u);
  const GgufValue* types = f->find("tokenizer.ggml.token_type");
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(types->arr_int.size(), 512u);
  EXPECT_EQ(types->arr_int[3], 6);  // byte tokens are type BYTE (6)

  // Metadata order is file order and the index agrees with it.
  for (const auto& [key, value] : f->metadata()) EXPECT_EQ(f->find(key), &value);
}

TEST(GgufSharedModels, Stories260KTensors) {
  auto f = open_or_fail(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->tensors().size(), 48u);  // 3 + 5 blocks * 9
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::F32);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 512);
  EXPECT_EQ(emb->shape_string(), "[64, 512]");
  EXPECT_EQ(emb->nbytes, 64u * 512u * 4u);
  float first = 0;
  std::memcpy(&first, emb->data, sizeof first);
  EXPECT_TRUE(std::isfinite(first));

  const GgufTensorInfo* norm = f->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->n_dims, 1);
  EXPECT_EQ(norm->shape_string(), "[64]");
  const GgufTensorInfo* down = f->find_tensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape_string(), "[172, 64]");
  EXPECT_NE(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.5.ffn_down.weight"), nullptr);
  expect_tensor_layout_sane(*f);
}

TEST(GgufSharedModels, EveryTinyModelOpens) {
  const std::string dir = models_dir() + "/tiny";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    SCOPED_TRACE(entry.path().string());
    auto f = open_or_fail(entry.path().string());
    ASSERT_TRUE(f);
    ++n;
    const std::string arch = f->get_string_or("general.architecture", "");
    EXPECT_TRUE(arch == "llama" || arch == "qwen2") << arch;
    EXPECT_FALSE(f->tensors().empty());
    expect_tensor_layout_sane(*f);
  }
  EXPECT_EQ(n, 11);
}

TEST(GgufSharedModels, TinyLlamaEncodings) {
  struct Case {
    const char* file;
    GgmlType matrix_type;
  };
  for (Case c :
       {Case{"tiny-llama-f16.gguf", GgmlType::F16}, Case{"tiny-llama-bf16.gguf", GgmlType::BF16},
        Case{"tiny-llama-q8_0.gguf", GgmlType::Q8_0}, Case{"tiny-llama-q6_k.gguf", GgmlType::Q6_K}}) {
    SCOPED_TRACE(c.file);
    auto f = open_or_fail(models_dir() + "/tiny/" + c.file);
    ASSERT_TRUE(f);
    const GgufTensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, c.matrix_type) << ggml_type_name(q->type);
    EXPECT_EQ(q->ne[0], 256);
  }
  auto f = open_or_fail(models_dir() + "/tiny/tiny-llama-q4_k_m.gguf");
  ASSERT_TRUE(f);
  int n_q4k = 0, n_q6k = 0;
  for (const auto& t : f->tensors()) {
    n_q4k += t.type == GgmlType::Q4_K;
    n_q6k += t.type == GgmlType::Q6_K;
  }
  EXPECT_EQ(n_q4k, 13);
  EXPECT_EQ(n_q6k, 3);
}

TEST(GgufSharedModels, EveryVocabFileOpens) {
  const std::string dir = models_dir() + "/llama.cpp-vocab";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    SCOPED_TRACE(entry.path().string());
    auto f = open_or_fail(entry.path().string());
    ASSERT_TRUE(f);
    ++n;
    // Vocab-only files end right after the metadata; they have no tensors at all.
    EXPECT_TRUE(f->tensors().empty());
    const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->elem_type, GgufValueType::STRING);
    EXPECT_GT(tokens->array_size(), 1000u);
    EXPECT_FALSE(f->get_string_or("tokenizer.ggml.model", "").empty());
  }
  EXPECT_EQ(n, 12);
}

TEST(GgufSharedModels, Llama2TinyRandomMatchesSpmVocab) {
  auto model = open_or_fail(models_dir() + "/llama-2-tiny-random.gguf");
  auto vocab = open_or_fail(models_dir() + "/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(model && vocab);
  EXPECT_EQ(model->get_int_or("llama.embedding_length", -1), 8);
  const GgufValue* a = model->find("tokenizer.ggml.tokens");
  const GgufValue* b = vocab->find("tokenizer.ggml.tokens");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->arr_str.size(), 32000u);
  EXPECT_EQ(a->arr_str, b->arr_str);
  expect_tensor_layout_sane(*model);
}

}  // namespace
}  // namespace kvserve
