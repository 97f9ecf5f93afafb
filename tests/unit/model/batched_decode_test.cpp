// A decode batch (one token of each of several sequences) gives, for every sequence, exactly the
// logits that decoding it alone gives - bit for bit - and leaves the same K/V bytes in the cache.
// With 2 pool threads and 8 sequences the batch takes the one-task-per-token attention path, where
// each token's task also applies its biases and RoPE and stores its own K/V row (forward.cpp);
// a single sequence takes the serial path. Covered: a llama model, a qwen2 model (q/k/v biases),
// f32 and quantized (q8_0, q4_0) K/V, the tiled q8_0 layout (head_dim 64), sequences of different
// lengths and block placements.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "model/model_test_util.h"
#include "model/paged_attention.h"

namespace kvserve {
namespace {

using testing::shared_path;

constexpr int kSeqs = 8;
constexpr int kBlockSize = 8;
constexpr int kBlocksPerSeq = 12;  // up to 96 positions per sequence

// tiled: the tiled q8_0 layout (kernels/kv_tiles.h), whose tiles need blocks of 16.
KvStorage make_kv(const Model& m, KvDType dtype, int32_t num_blocks, bool tiled = false) {
  auto kv = KvStorage::create(testing::model_kv_layout(m, tiled ? 16 : kBlockSize, dtype, tiled), num_blocks);
  EXPECT_TRUE(kv.ok());
  return std::move(kv).value();
}

// Sequence s owns blocks table[s] (interleaved across the arena, so neighbours' blocks alternate).
std::vector<std::vector<int32_t>> block_tables() {
  std::vector<std::vector<int32_t>> t(kSeqs);
  for (int s = 0; s < kSeqs; ++s)
    for (int b = 0; b < kBlocksPerSeq; ++b) t[size_t(s)].push_back(int32_t(b * kSeqs + (s * 5) % kSeqs));
  return t;
}

SeqChunk chunk(const std::vector<int32_t>& table, int64_t start, int32_t n) {
  SeqChunk c;
  c.start_pos = start;
  c.num_tokens = n;
  c.block_table = table;
  return c;
}

void check_model(const std::string& path, KvDType dtype, bool tiled = false) {
  SCOPED_TRACE(path + " kv " + std::string(kv_dtype_name(dtype)) + (tiled ? " tiled" : ""));
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Model& model = **m;
  const int nv = model.hparams().n_vocab;
  const auto tables = block_tables();
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    prompts[size_t(s)].resize(size_t(3 + 9 * s));  // 3 .. 66 tokens: several blocks, partial last ones
    for (auto& t : prompts[size_t(s)]) t = int32_t(rng() % uint32_t(nv));
  }
  const int32_t num_blocks = kSeqs * kBlocksPerSeq;
  KvStorage batched_kv = make_kv(model, dtype, num_blocks, tiled), solo_kv = make_kv(model, dtype, num_blocks, tiled);
  ThreadPool pool(2);
  ForwardPass batched(model, batched_kv, pool), solo(model, solo_kv, pool);
  std::vector<float> logits;
  for (int s = 0; s < kSeqs; ++s) {  // the same prefill into both caches
    ForwardBatch b;
    b.tokens = prompts[size_t(s)];
    b.chunks.push_back(chunk(tables[size_t(s)], 0, int32_t(b.tokens.size())));
    ASSERT_TRUE(batched.run(b, &logits).ok());
    ASSERT_TRUE(solo.run(b, &logits).ok());
  }
  for (int step = 0; step < 3; ++step) {
    ForwardBatch b;
    for (int s = 0; s < kSeqs; ++s) {
      b.tokens.push_back(int32_t((7 * s + 3 * step + 1) % nv));
      b.chunks.push_back(chunk(tables[size_t(s)], int64_t(prompts[size_t(s)].size()) + step, 1));
    }
    std::vector<float> all;
    ASSERT_TRUE(batched.run(b, &all).ok());
    ASSERT_EQ(all.size(), size_t(kSeqs) * size_t(nv));
    for (int s = 0; s < kSeqs; ++s) {
      ForwardBatch one;
      one.tokens = {b.tokens[size_t(s)]};
      one.chunks = {b.chunks[size_t(s)]};
      ASSERT_TRUE(solo.run(one, &logits).ok());
      ASSERT_EQ(0, std::memcmp(logits.data(), all.data() + size_t(s) * size_t(nv), size_t(nv) * sizeof(float)))
          << "step " << step << " sequence " << s;
    }
  }
  // The stored K/V rows are the same bytes too.
  const KvLayout& L = batched_kv.layout();
  for (int32_t blk = 0; blk < num_blocks; ++blk)
    for (int l = 0; l < L.num_layers; ++l) {
      const size_t kb = L.plane_bytes(KvPart::kKey), vb = L.plane_bytes(KvPart::kValue);
      ASSERT_EQ(0, std::memcmp(batched_kv.k_block(blk, l), solo_kv.k_block(blk, l), kb)) << "K block " << blk;
      ASSERT_EQ(0, std::memcmp(batched_kv.v_block(blk, l), solo_kv.v_block(blk, l), vb)) << "V block " << blk;
    }
}

// Two tokens of one sequence in one batch (positions p and p + 1, in the same block and across a
// block boundary) with six other sequences: the second token must see the first one's K/V, as if
// the tokens had been decoded one after the other (the forward pass stores every row before any
// attention reads here, rather than per token task).
TEST(BatchedDecode, TwoTokensOfOneSequenceSeeEachOther) {
  auto m = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(m.ok());
  const Model& model = **m;
  const int nv = model.hparams().n_vocab;
  const auto tables = block_tables();
  for (int64_t len0 : {13, 15}) {  // sequence 0's two new tokens at 13, 14 (one block) or 15, 16 (two)
    SCOPED_TRACE("sequence 0 prompt of " + std::to_string(len0));
    const int32_t num_blocks = kSeqs * kBlocksPerSeq;
    KvStorage batched_kv = make_kv(model, KvDType::F32, num_blocks), solo_kv = make_kv(model, KvDType::F32, num_blocks);
    ThreadPool pool(2);
    ForwardPass batched(model, batched_kv, pool), solo(model, solo_kv, pool);
    std::vector<float> logits;
    std::vector<int64_t> len(7);
    for (int s = 0; s < 7; ++s) {
      len[size_t(s)] = s == 0 ? len0 : 20 + s;
      ForwardBatch b;
      for (int64_t i = 0; i < len[size_t(s)]; ++i) b.tokens.push_back(int32_t((11 * i + 5 * s + 1) % nv));
      b.chunks.push_back(chunk(tables[size_t(s)], 0, int32_t(b.tokens.size())));
      ASSERT_TRUE(batched.run(b, &logits).ok());
      ASSERT_TRUE(solo.run(b, &logits).ok());
    }
    // Sequence 0's later token first (its task would run before the earlier token's row is
    // stored, were rows stored per task), then its earlier one, then sequences 1..6.
    ForwardBatch b;
    b.tokens = {8, 7};
    b.chunks = {chunk(tables[0], len[0] + 1, 1), chunk(tables[0], len[0], 1)};
    for (int s = 1; s < 7; ++s) {
      b.tokens.push_back(int32_t(30 + s));
      b.chunks.push_back(chunk(tables[size_t(s)], len[size_t(s)], 1));
    }
    std::vector<float> all;
    ASSERT_TRUE(batched.run(b, &all).ok());
    for (size_t c : {size_t(1), size_t(0), size_t(2), size_t(3), size_t(4), size_t(5), size_t(6), size_t(7)}) {
      ForwardBatch one;  // one at a time, sequence 0's in position order
      one.tokens = {b.tokens[c]};
      one.chunks = {b.chunks[c]};
      ASSERT_TRUE(solo.run(one, &logits).ok());
      ASSERT_EQ(0, std::memcmp(logits.data(), all.data() + c * size_t(nv), size_t(nv) * sizeof(float))) << "chunk " << c;
    }
  }
}

TEST(BatchedDecode, EqualsEachSequenceAloneLlama) {
  for (KvDType t : {KvDType::F32, KvDType::Q8_0, KvDType::Q4_0}) check_model(shared_path("models/stories260K.gguf"), t);
}

// head_dim 64 with q8_0 or q4_0 K/V: the tiled layout, each token's task scattering its rows into
// its sequence's tiles while the other tasks read theirs (rows and tiled alike).
TEST(BatchedDecode, EqualsEachSequenceAloneTiled) {
  for (KvDType t : {KvDType::Q8_0, KvDType::Q4_0})
    for (bool tiled : {true, false}) check_model(shared_path("models/tiny/tiny-llama-f32.gguf"), t, tiled);
}

// The engine tiles a q8_0 / q4_0 cache only where a tiled kernel runs (attention_has_tiled_kernel:
// head_dim 64, both vector paths), blocks of a multiple of 16 (elsewhere tiled planes would be
// read through gathered rows).
TEST(KvTilesPreferred, OnlyWhereTheTiledKernelRuns) {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 64;
  l.block_size = 16;
  l.set_dtype(KvDType::Q8_0);
  const char* off = std::getenv("KVSERVE_KV_TILES");
  const bool allowed = off == nullptr || std::string(off) != "0";
  // q8_0 / q4_0 K and V, the same or mixed: both vector paths have a tiled kernel.
  EXPECT_EQ(kv_tiles_preferred(l), allowed);
  KvLayout other = l;
  other.set_dtype(KvDType::Q4_0);
  EXPECT_EQ(kv_tiles_preferred(other), allowed);
  other.k_dtype = KvDType::Q8_0;
  EXPECT_EQ(kv_tiles_preferred(other), allowed);
  other = l;
  other.head_dim = 128;
  EXPECT_FALSE(kv_tiles_preferred(other));
  other = l;
  other.block_size = 8;
  EXPECT_FALSE(kv_tiles_preferred(other));
  other = l;
  other.set_dtype(KvDType::F16);
  EXPECT_FALSE(kv_tiles_preferred(other));
  attention_pin_isa(Isa::kAvx2);  // the AVX2 path alike
  EXPECT_EQ(kv_tiles_preferred(l), allowed);
  other = l;
  other.v_dtype = KvDType::Q4_0;
  EXPECT_EQ(kv_tiles_preferred(other), allowed);
  attention_pin_isa(Isa::kScalar);
}

TEST(BatchedDecode, EqualsEachSequenceAloneQwen2WithBiases) {
  for (KvDType t : {KvDType::F32, KvDType::Q8_0})
    check_model(shared_path("models/tiny/tiny-qwen2-f32.gguf"), t);
}

}  // namespace
}  // namespace kvserve
