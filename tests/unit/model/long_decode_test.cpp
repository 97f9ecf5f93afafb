// A single sequence decoded past several attention chunks: with 2 pool threads each chunk of a
// decode token's attention is its own task, and each task hints the K/V of the chunk after it
// (forward.cpp, hint_end). The logits must be those of a 1-thread pass, bit for bit (the chunks'
// states merge in position order either way), for the tiled and the row layouts, over a block
// table in reverse order (so a hint that ran past the sequence's table would read out of bounds,
// which the sanitizer build reports).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "model/model_test_util.h"

namespace kvserve {
namespace {

using testing::shared_path;

constexpr int kBlockSize = 16;
constexpr int kPrompt = 3 * int(kAttentionChunk) + 40;  // four chunks, the last one short
constexpr int kSteps = 3;
constexpr int kBlocks = (kPrompt + kSteps + kBlockSize - 1) / kBlockSize;

void check(KvDType dtype, bool tiled) {
  SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + (tiled ? " tiled" : " rows"));
  auto m = Model::load(shared_path("models/tiny/tiny-llama-f32.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Model& model = **m;
  ASSERT_GE(model.hparams().n_ctx_train, kPrompt + kSteps);
  auto kv = KvStorage::create(testing::model_kv_layout(model, kBlockSize, dtype, tiled), kBlocks);
  ASSERT_TRUE(kv.ok());
  std::vector<int32_t> table(kBlocks);
  for (int b = 0; b < kBlocks; ++b) table[size_t(b)] = kBlocks - 1 - b;
  ThreadPool two(2), one(1);
  ForwardPass pass2(model, kv.value(), two), pass1(model, kv.value(), one);

  const int nv = model.hparams().n_vocab;
  std::mt19937 rng(5);
  ForwardBatch prefill;
  for (int i = 0; i < kPrompt; ++i) prefill.tokens.push_back(int32_t(rng() % uint32_t(nv)));
  prefill.chunks.push_back({0, kPrompt, table, false});
  std::vector<float> a, b;
  ASSERT_TRUE(pass2.run(prefill, &a).ok());
  for (int step = 0; step < kSteps; ++step) {
    // Both passes store the same K/V row at this position, then attend over all of them.
    ForwardBatch d;
    d.tokens = {int32_t(rng() % uint32_t(nv))};
    d.chunks.push_back({kPrompt + step, 1, table, false});
    ASSERT_TRUE(pass2.run(d, &a).ok());
    ASSERT_TRUE(pass1.run(d, &b).ok());
    ASSERT_EQ(a.size(), size_t(nv));
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "step " << step;
  }
}

TEST(LongDecode, ChunkTasksEqualOneThreadTiled) { check(KvDType::Q8_0, true); }
TEST(LongDecode, ChunkTasksEqualOneThreadRows) {
  check(KvDType::Q8_0, false);
  check(KvDType::F32, false);
}

}  // namespace
}  // namespace kvserve
