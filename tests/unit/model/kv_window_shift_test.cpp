// The model side of sliding windows and context shifts, on real weights (stories260K: llama
// pairs; a tiny synth qwen2: neox pairs, rope base 1e6):
//  - a context shift's re-rotated keys equal the keys computed from scratch at the new
//    positions (layer 0, whose K/V depend only on the token and its position), values move
//    unchanged, and the kept sink tokens keep every layer;
//  - a windowed decode never reads outside its window: the K/V before it are poisoned with NaN
//    and their blocks released to holes, and the logits are unchanged and finite;
//  - windowed prefill and windowed token-by-token decode agree, and a window longer than the
//    sequence is no window at all;
//  - a long prefill, whose tokens share the K/V reads of whole position chunks, gives exactly
//    (bit for bit) the logits of token-by-token decoding, with and without a window.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "kernels/kv_tiles.h"
#include "kvcache/kv_cache_manager.h"
#include "model/kv_shift.h"
#include "model/model_test_util.h"
#include "model/paged_attention.h"
#include "model/synth.h"

namespace kvserve {
namespace {

using testing::shared_path;

// The KV layout of a Rig: block size 8 in rows, or (tiled) block size 16 in the tiled layout.
struct RigLayout {
  KvDType dtype;
  bool tiled = false;
  int block_size() const { return tiled ? 16 : 8; }
};

// One model, its KV storage and a cache manager with one sequence (id 1).
struct Rig {
  const Model& model;
  KvStorage kv;
  KvCacheManager cache;
  ThreadPool pool{2};
  ForwardPass fwd;
  Rig(const Model& m, RigLayout layout, int32_t num_blocks)
      : model(m),
        kv(make_kv(m, layout, num_blocks)),
        cache(num_blocks, layout.block_size(), PrefixCacheOptions{false}),
        fwd(m, kv, pool) {
    EXPECT_TRUE(cache.allocate(1, 0).ok());
  }
  Rig(const Model& m, KvDType dtype, int32_t num_blocks) : Rig(m, RigLayout{dtype}, num_blocks) {}
  static KvStorage make_kv(const Model& m, RigLayout layout, int32_t num_blocks) {
    auto kv = KvStorage::create(testing::model_kv_layout(m, layout.block_size(), layout.dtype, layout.tiled),
                                num_blocks);
    EXPECT_TRUE(kv.ok());
    return std::move(kv).value();
  }
  // Appends tokens[start, start + n) (positions start..) and runs them; the logits of the last
  // (or of every one, all_logits) come back.
  std::vector<float> run(const std::vector<int32_t>& tokens, int64_t start, int64_t n, int64_t window = 0,
                         bool all_logits = false) {
    EXPECT_TRUE(cache.append_slots(1, n).ok());
    ForwardBatch b;
    b.tokens.assign(tokens.begin() + start, tokens.begin() + start + n);
    SeqChunk c;
    c.start_pos = start;
    c.num_tokens = int32_t(n);
    c.block_table = cache.block_table(1);
    c.window = window;
    c.all_logits = all_logits;
    b.chunks.push_back(c);
    std::vector<float> logits;
    Status st = fwd.run(b, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return logits;
  }
  // Dequantized K (part 0) or V (part 1) head row of position p, layer l.
  std::vector<float> row(int part, int64_t p, int l, int h) const {
    const KvLayout& L = kv.layout();
    const KvPart kp = part == 0 ? KvPart::kKey : KvPart::kValue;
    const KvSlot s = cache.slot(1, p);
    const uint8_t* base = part == 0 ? kv.k_block(s.block, l) : kv.v_block(s.block, l);
    std::vector<float> y(size_t(L.head_dim));
    std::vector<uint8_t> tiled_row(L.tiled ? L.head_row_bytes(kp) : 0);
    if (L.tiled)
      kv_tiled_load_row(kv_elem_of(L.dtype(kp)), part == 1, base, L.num_kv_heads, L.head_dim, s.offset, h,
                        tiled_row.data());
    const uint8_t* src = L.tiled ? tiled_row.data() : base + size_t(s.offset) * L.slot_bytes(kp) + size_t(h) * L.head_row_bytes(kp);
    kv_dequantize_row_scalar(kv_elem_of(L.dtype(kp)), src, L.head_dim, y.data());
    return y;
  }
};

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(n_vocab));
  return t;
}

// Largest |a - b| relative to the row's largest |b| (the scale quantization steps follow).
double row_error(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 1e-6, err = 0;
  for (size_t i = 0; i < b.size(); ++i) mx = std::max(mx, std::fabs(double(b[i])));
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(double(a[i]) - b[i]));
  return err / mx;
}

// tol: largest row_error allowed between shifted and recomputed K/V.
// tol: the largest row_error allowed between shifted and recomputed keys; the keys before the
// re-rotation must differ by more than `separation` times it.
void check_shift_matches_recompute(const Model& m, RigLayout dtype, double tol, double separation = 10) {
  const int n = 45, keep = 3, discard = 16;
  const auto tokens = random_tokens(n, m.hparams().n_vocab, 5);
  Rig shifted(m, dtype, 16);
  shifted.run(tokens, 0, n);
  Expected<KvShiftPlan> plan = shifted.cache.shift(1, keep, discard);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  apply_kv_shift(shifted.kv, m, *plan, shifted.cache.block_table(1), &shifted.pool);

  std::vector<int32_t> kept(tokens.begin(), tokens.begin() + keep);
  kept.insert(kept.end(), tokens.begin() + keep + discard, tokens.end());
  Rig fresh(m, dtype, 16);
  fresh.run(kept, 0, int64_t(kept.size()));
  ASSERT_EQ(shifted.cache.num_tokens(1), int64_t(kept.size()));

  const ModelHparams& hp = m.hparams();
  double max_err = 0;
  for (int64_t p = 0; p < int64_t(kept.size()); ++p)
    for (int l = 0; l < (p < keep ? hp.n_layer : 1); ++l)  // sinks: every layer; moved: layer 0
      for (int part = 0; part < 2; ++part)
        for (int h = 0; h < hp.n_head_kv; ++h) {
          const auto a = shifted.row(part, p, l, h), b = fresh.row(part, p, l, h);
          max_err = std::max(max_err, row_error(a, b));
        }
  EXPECT_LT(max_err, tol) << "shifted keys differ from keys computed at the new positions";
  // And it must not be trivially equal: before the re-rotation the moved keys were different.
  Rig unrotated(m, dtype, 16);
  unrotated.run(tokens, 0, n);
  Expected<KvShiftPlan> p2 = unrotated.cache.shift(1, keep, discard);
  ASSERT_TRUE(p2.ok());
  for (const KvSlotCopy& c : p2->copies) copy_kv_slots(unrotated.kv, c);
  double diff = 0;
  for (int64_t p = keep; p < int64_t(kept.size()); ++p) {
    diff = std::max(diff, row_error(unrotated.row(0, p, 0, 0), fresh.row(0, p, 0, 0)));
  }
  EXPECT_GT(diff, separation * tol) << "the test cannot tell rotated from unrotated keys";
}

TEST(KvShift, StoriesKeysReRotatedEqualRecomputed) {
  auto m = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  check_shift_matches_recompute(**m, RigLayout{KvDType::F32}, 1e-5);
  check_shift_matches_recompute(**m, RigLayout{KvDType::F16}, 2e-3);
  check_shift_matches_recompute(**m, RigLayout{KvDType::Q8_0}, 2.5 / 127);  // two roundings of a step max/127 at most
}

// The tiled q8_0 / q4_0 layout (kernels/kv_tiles.h; head_dim 64, block size 16): slots copied and
// keys re-rotated through the tiles, the same as the row layout's within its rounding.
TEST(KvShift, TiledLlamaKeysReRotatedEqualRecomputed) {
  auto m = Model::load(shared_path("models/tiny/tiny-llama-f32.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->hparams().head_dim, 64);
  check_shift_matches_recompute(**m, RigLayout{KvDType::Q8_0, true}, 2.5 / 127);
  check_shift_matches_recompute(**m, RigLayout{KvDType::Q8_0, false}, 2.5 / 127);
  // A q4_0 step is max/8: two roundings of it at most, which leaves room for a 5x separation only.
  check_shift_matches_recompute(**m, RigLayout{KvDType::Q4_0, true}, 2.5 / 8, 5);
  check_shift_matches_recompute(**m, RigLayout{KvDType::Q4_0, false}, 2.5 / 8, 5);
}

TEST(KvShift, QwenNeoxPairsReRotatedEqualRecomputed) {
  testing::TempDir dir;
  SynthSpec s;
  s.name = "tiny-qwen2";
  s.arch = "qwen2";
  s.n_embd = 128;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_ctx = 256;
  s.rope_freq_base = 1e6f;
  s.qkv_bias = true;
  s.tied_output = true;
  SynthOptions o;
  o.vocab_path = testing::default_vocab();
  auto scheme = parse_quant_scheme("f32");
  ASSERT_TRUE(scheme.ok());
  ASSERT_TRUE(synth_model(s, *scheme, o, dir.file("q.gguf")).ok());
  auto m = Model::load(dir.file("q.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE((*m)->hparams().rope_neox);
  check_shift_matches_recompute(**m, RigLayout{KvDType::F32}, 1e-5);
}

TEST(KvWindow, DecodeNeverReadsOutsideItsWindow) {
  auto m = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(m.ok());
  const int n = 50, window = 12;
  const auto tokens = random_tokens(n, (*m)->hparams().n_vocab, 9);
  Rig clean(**m, KvDType::F32, 8), poisoned(**m, KvDType::F32, 8);
  clean.run(tokens, 0, n - 1, window);
  poisoned.run(tokens, 0, n - 1, window);
  // The last token (position n - 1) attends to [n - window, n - 1]: poison everything before.
  const int64_t first = n - window;
  const KvLayout& L = poisoned.kv.layout();
  std::vector<float> nan_row(size_t(L.head_dim), NAN);
  for (int64_t p = (first / 8) * 8; p < first; ++p)
    for (int l = 0; l < L.num_layers; ++l)
      for (int h = 0; h < L.num_kv_heads; ++h) {
        const KvSlot s = poisoned.cache.slot(1, p);
        for (KvPart part : {KvPart::kKey, KvPart::kValue}) {
          uint8_t* base = part == KvPart::kKey ? poisoned.kv.k_block(s.block, l) : poisoned.kv.v_block(s.block, l);
          kv_quantize_row(KvElem::F32, nan_row.data(), L.head_dim,
                          base + size_t(s.offset) * L.slot_bytes(part) + size_t(h) * L.head_row_bytes(part));
        }
      }
  ASSERT_TRUE(poisoned.cache.release_before(1, first).ok());
  ASSERT_EQ(poisoned.cache.block_table(1)[0], kNoBlock);
  const auto want = clean.run(tokens, n - 1, 1, window);
  const auto got = poisoned.run(tokens, n - 1, 1, window);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "a position outside the window was read";
    ASSERT_EQ(got[i], want[i]) << i;
  }
  // Without the window the same decode differs (the window really cuts something off).
  Rig full(**m, KvDType::F32, 8);
  full.run(tokens, 0, n - 1);
  const auto unwindowed = full.run(tokens, n - 1, 1);
  double diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::fabs(double(got[i]) - unwindowed[i]));
  EXPECT_GT(diff, 1e-3);
}

TEST(KvWindow, PrefillEqualsDecodeAndALongWindowIsNoWindow) {
  auto m = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(m.ok());
  const int n = 40, window = 9;
  const size_t nv = size_t((*m)->hparams().n_vocab);
  const auto tokens = random_tokens(n, int(nv), 13);
  Rig prefill(**m, KvDType::F32, 8), decode(**m, KvDType::F32, 8);
  const auto all = prefill.run(tokens, 0, n, window, true);
  for (int p = 0; p < n; ++p) {
    const auto row = decode.run(tokens, p, 1, window);
    ASSERT_TRUE(decode.cache.release_before(1, p + 2 - window).ok());  // as the scheduler does
    for (size_t i = 0; i < nv; ++i)
      ASSERT_NEAR(row[i], all[size_t(p) * nv + i], 1e-4 * (1 + std::fabs(row[i]))) << "position " << p;
  }
  EXPECT_LE(decode.cache.num_held_blocks(1), window / 8 + 2);
  Rig plain(**m, KvDType::F32, 8), wide(**m, KvDType::F32, 8);
  EXPECT_EQ(plain.run(tokens, 0, n, 0, true), wide.run(tokens, 0, n, n, true));
}

TEST(KvWindow, LongPrefillIsBitIdenticalToTokenByTokenDecode) {
  auto m = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(m.ok());
  const int n = 700;  // five position chunks of 128: most tokens share whole chunks
  const size_t nv = size_t((*m)->hparams().n_vocab);
  const auto tokens = random_tokens(n, int(nv), 17);
  for (int64_t window : {0, 300}) {
    SCOPED_TRACE("window " + std::to_string(window));
    Rig prefill(**m, KvDType::F16, 90), split(**m, KvDType::F16, 90), decode(**m, KvDType::F16, 90);
    const auto all = prefill.run(tokens, 0, n, window, true);
    auto part = split.run(tokens, 0, 333, window, true);  // a chunked prefill, cut mid-chunk
    const auto rest = split.run(tokens, 333, n - 333, window, true);
    part.insert(part.end(), rest.begin(), rest.end());
    ASSERT_EQ(part.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(part[i], all[i]) << "chunked prefill, row " << i / nv;
    for (int p = 0; p < n; ++p) {
      const auto row = decode.run(tokens, p, 1, window);
      for (size_t i = 0; i < nv; ++i) ASSERT_EQ(row[i], all[size_t(p) * nv + i]) << "decode, position " << p;
    }
  }
}

}  // namespace
}  // namespace kvserve
