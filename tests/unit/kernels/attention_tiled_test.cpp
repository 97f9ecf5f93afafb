// The tiled q8_0 / q4_0 K/V layout (kernels/kv_tiles.h) and attention over it: rows stored and
// loaded back unchanged, the documented byte positions, and attention over a tiled copy of an arena
// against the naive reference over the row arena's values (the tiled kernels where the path has
// one, attention_has_tiled_kernel; elsewhere the row kernels on gathered rows, bit for bit the row
// layout's result), with windows that start and
// end mid-tile (the blocks before them holes), several KV heads at once, and unreadable bytes in
// the slots past the end; for each pair of K and V types (q8_0, q4_0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_fixture.h"
#include "kernels/attention_impl.h"
#include "kernels/kv_quant.h"
#include "kernels/kv_tiles.h"

namespace kvserve {
namespace {

// A tiled copy of a q8_0 / q4_0 arena: the same block ids and block stride, each plane tiled.
struct TiledArena {
  const Arena& rows;
  std::vector<uint8_t> bytes;

  explicit TiledArena(Arena& a) : rows(a), bytes(a.bytes.size(), 0) {
    for (int b = 0; b < a.num_blocks; ++b)
      for (int part = 0; part < 2; ++part)
        for (int slot = 0; slot < a.block_size; ++slot)
          for (int h = 0; h < a.num_kv_heads; ++h)
            kv_tiled_store_row(part ? a.v_type : a.k_type, part == 1, plane(b, part), a.num_kv_heads, a.head_dim,
                               slot, h, a.row_at(b, part, slot * a.num_kv_heads + h));
  }
  uint8_t* plane(int block, int part) {
    return bytes.data() + size_t(block) * rows.block_stride() + (part ? rows.plane_bytes(0) : 0);
  }
  PagedKvView view() const {
    PagedKvView v = rows.view();
    v.k0 = bytes.data();
    v.v0 = bytes.data() + rows.plane_bytes(0);
    v.tiled = true;
    return v;
  }
};

// (vector path, (K type, V type)).
struct TypePair { KvElem k, v; };
constexpr TypePair kTypePairs[] = {
    {KvElem::Q8_0, KvElem::Q8_0}, {KvElem::Q4_0, KvElem::Q4_0}, {KvElem::Q8_0, KvElem::Q4_0}, {KvElem::Q4_0, KvElem::Q8_0}};

class TiledAttention : public ::testing::TestWithParam<std::tuple<Isa, TypePair>> {
 protected:
  void SetUp() override { attention_pin_isa(std::get<0>(GetParam())); }
  void TearDown() override { attention_pin_isa(Isa::kScalar); }
  Isa isa() const { return std::get<0>(GetParam()); }
  KvElem k_type() const { return std::get<1>(GetParam()).k; }
  KvElem v_type() const { return std::get<1>(GetParam()).v; }
};
INSTANTIATE_TEST_SUITE_P(PathsAndTypes, TiledAttention,
                         ::testing::Combine(::testing::ValuesIn(vector_isas()), ::testing::ValuesIn(kTypePairs)),
                         [](const ::testing::TestParamInfo<std::tuple<Isa, TypePair>>& info) {
                           const TypePair t = std::get<1>(info.param);
                           return isa_name(::testing::TestParamInfo<Isa>(std::get<0>(info.param), 0)) + "_k_" +
                                  name(t.k) + "_v_" + name(t.v);
                         });

TEST(KvTiles, SupportedShapes) {
  EXPECT_TRUE(kv_tiles_supported(KvElem::Q8_0, KvElem::Q8_0, 64, 16));
  EXPECT_TRUE(kv_tiles_supported(KvElem::Q8_0, KvElem::Q8_0, 128, 32));
  EXPECT_TRUE(kv_tiles_supported(KvElem::Q8_0, KvElem::Q4_0, 64, 16));
  EXPECT_TRUE(kv_tiles_supported(KvElem::Q4_0, KvElem::Q4_0, 64, 16));
  EXPECT_FALSE(kv_tiles_supported(KvElem::F16, KvElem::F16, 64, 16));
  EXPECT_FALSE(kv_tiles_supported(KvElem::Q4_0, KvElem::F32, 64, 16));
  EXPECT_FALSE(kv_tiles_supported(KvElem::Q8_0, KvElem::Q8_0, 40, 16));
  EXPECT_FALSE(kv_tiles_supported(KvElem::Q4_0, KvElem::Q4_0, 48, 16));
  EXPECT_FALSE(kv_tiles_supported(KvElem::Q8_0, KvElem::Q8_0, 64, 8));
  EXPECT_EQ(kv_tile_head_bytes(KvElem::Q8_0, 64), size_t(16 * 68));
  EXPECT_EQ(kv_tile_head_bytes(KvElem::Q4_0, 64), size_t(16 * 36));
}

// Every row comes back byte for byte, and the bytes sit where kv_tiles.h says (with C code bytes
// per row and b a code byte's index in its row).
TEST(KvTiles, RowsRoundTripAtTheDocumentedPlaces) {
  for (KvElem type : {KvElem::Q8_0, KvElem::Q4_0})
    for (int hd : {32, 64, 128}) {
      const int nh = 3, bs = 32;
      const size_t rb = kv_row_bytes(type, hd), c = type == KvElem::Q4_0 ? size_t(hd) / 2 : size_t(hd);
      const size_t group_codes = c / size_t(hd / 32), group_bytes = 2 + group_codes;
      std::vector<uint8_t> plane(size_t(bs) * nh * rb), rows(plane.size()), back(rb);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = uint8_t(i * 7 + i / 97);
      for (int part = 0; part < 2; ++part) {
        std::fill(plane.begin(), plane.end(), 0);
        for (int s = 0; s < bs; ++s)
          for (int h = 0; h < nh; ++h)
            kv_tiled_store_row(type, part == 1, plane.data(), nh, hd, s, h, &rows[(size_t(s) * nh + h) * rb]);
        for (int s = 0; s < bs; ++s)
          for (int h = 0; h < nh; ++h) {
            const std::string where = std::string(name(type)) + " hd " + std::to_string(hd) + " part " +
                                      std::to_string(part) + " slot " + std::to_string(s);
            const uint8_t* row = &rows[(size_t(s) * nh + h) * rb];
            kv_tiled_load_row(type, part == 1, plane.data(), nh, hd, s, h, back.data());
            ASSERT_EQ(0, std::memcmp(back.data(), row, rb)) << where;
            const uint8_t* tile = plane.data() + kv_tile_offset(type, s / 16, h, nh, hd);
            const size_t j = size_t(s % 16);
            // w bytes per lane (q8_0 K: 4, else 2); q8_0 K codes kept + 128 (XOR 0x80).
            const size_t w = type == KvElem::Q8_0 && part == 0 ? 4 : 2;
            const uint8_t flip = type == KvElem::Q8_0 && part == 0 ? 0x80 : 0;
            for (size_t b = 0; b < c; ++b) {
              const uint8_t code = row[(b / group_codes) * group_bytes + 2 + b % group_codes];
              const size_t at = part == 0 ? ((b / w) * 16 + j) * w + b % w : ((j / w) * c + b) * w + j % w;
              ASSERT_EQ(tile[at], uint8_t(code ^ flip)) << where << " code byte " << b;
            }
            for (size_t g = 0; g < size_t(hd / 32); ++g)
              ASSERT_EQ(0, std::memcmp(tile + 16 * c + (g * 16 + j) * 2, row + g * group_bytes, 2)) << where;
          }
      }
    }
}

// kv_tiled_row_span's ranges (whose lines kv_tiled_hint_store prefetches) hold every byte a row's
// store writes, and lie inside the slot's tile-head.
TEST(KvTiles, RowSpanHoldsEveryStoredByte) {
  for (KvElem type : {KvElem::Q8_0, KvElem::Q4_0})
    for (int hd : {32, 64, 96, 128}) {
      const int nh = 3, bs = 32;
      const size_t rb = kv_row_bytes(type, hd), th = kv_tile_head_bytes(type, hd);
      const std::vector<uint8_t> row(rb, 0xFF);  // every stored byte becomes nonzero
      std::vector<uint8_t> plane(size_t(bs) * nh * rb);
      for (int part = 0; part < 2; ++part)
        for (int s = 0; s < bs; ++s)
          for (int h = 0; h < nh; ++h) {
            const std::string where = std::string(name(type)) + " hd " + std::to_string(hd) + " part " +
                                      std::to_string(part) + " slot " + std::to_string(s) + " head " + std::to_string(h);
            std::fill(plane.begin(), plane.end(), 0);
            kv_tiled_store_row(type, part == 1, plane.data(), nh, hd, s, h, row.data());
            const KvTileRowSpan r = kv_tiled_row_span(type, part == 1, hd, s);
            ASSERT_LT(r.codes_begin, r.codes_end) << where;
            ASSERT_LE(r.codes_end, r.scales_begin) << where;
            ASSERT_LT(r.scales_begin, r.scales_end) << where;
            ASSERT_LE(r.scales_end, th) << where;
            const size_t tile = kv_tile_offset(type, s / 16, h, nh, hd);
            size_t written = 0;
            for (size_t i = 0; i < plane.size(); ++i) {
              if (plane[i] == 0) continue;
              ++written;
              ASSERT_TRUE(i >= tile && i < tile + th) << where << " byte " << i << " outside the tile-head";
              const size_t o = i - tile;
              ASSERT_TRUE((o >= r.codes_begin && o < r.codes_end) || (o >= r.scales_begin && o < r.scales_end))
                  << where << " byte " << o << " of the tile-head outside the row's span";
            }
            ASSERT_EQ(written, rb) << where;
          }
    }
}

// Attention over the tiled copy: the naive softmax of the stored values with the query rounded as
// the path reads it (8 bits for the AVX-512 kernel's q8_0 K, else 16), within the rounding of the
// V weights (2^-16 of a span's largest); where the path has no tiled kernel for the types and
// head dim (attention_has_tiled_kernel) the gathered rows give the row layout's result exactly. Every shape
// of the supported models' heads and more.
TEST_P(TiledAttention, MatchesNaiveSoftmax) {
  struct Case { int head_dim, num_kv_heads, group, block_size; };
  const Case cases[] = {{64, 3, 3, 16}, {64, 2, 7, 16}, {64, 8, 4, 32}, {64, 1, 1, 64}, {64, 1, 9, 16},
                        {128, 2, 4, 32}, {32, 1, 2, 16}};
  uint32_t seed = 3;
  double max_err = 0, sum_sq = 0;
  int64_t count = 0;
  for (const Case& c : cases)
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {0, 5}, {0, 16}, {0, 17}, {0, 300}, {5, 21},
                              {37, 300}, {130, 131}, {100, 400}}) {
      Arena a(c.block_size, c.num_kv_heads, c.head_dim, k_type(), v_type(), end, seed++);
      const TiledArena t(a);
      // Blocks wholly before the window are holes, as after KvCacheManager::release_before.
      for (int64_t b = 0; b < begin / c.block_size; ++b) a.table[size_t(b)] = -1;
      const auto q = random_q(c.num_kv_heads * c.group, c.head_dim, seed++, 2.0f);
      const float scale = 1.0f / std::sqrt(float(c.head_dim));
      const size_t qh = size_t(c.group) * size_t(c.head_dim);
      std::vector<float> tiled(qh * size_t(c.num_kv_heads)), rows(tiled.size()), one(qh), scalar(qh);
      attention_group_range_heads(t.view(), begin, end, 0, c.num_kv_heads, q.data(), c.group, scale, tiled.data());
      attention_group_range_heads(a.view(), begin, end, 0, c.num_kv_heads, q.data(), c.group, scale, rows.data());
      const auto qr = rounded_if_the_path_rounds(q, t.view(), c.head_dim);
      for (int h = 0; h < c.num_kv_heads; ++h) {
        const auto want = naive(a, end, h, qr.data() + size_t(h) * qh, c.group, scale, begin);
        attention_group_range(t.view(), begin, end, h, q.data() + size_t(h) * qh, c.group, scale, one.data());
        attention_group_range_scalar(t.view(), begin, end, h, q.data() + size_t(h) * qh, c.group, scale,
                                     scalar.data());
        const auto want_exact = naive(a, end, h, q.data() + size_t(h) * qh, c.group, scale, begin);
        for (size_t i = 0; i < qh; ++i) {
          const float got = tiled[size_t(h) * qh + i];
          const double e = std::fabs(got - want[i]);
          max_err = std::max(max_err, e);
          sum_sq += e * e;
          ++count;
          ASSERT_NEAR(got, want[i], 2.5e-4 * (1 + std::fabs(want[i])))
              << "hd " << c.head_dim << " heads " << c.num_kv_heads << " group " << c.group << " bs "
              << c.block_size << " [" << begin << "," << end << ") h " << h << " i " << i;
          ASSERT_EQ(got, one[i]) << "one head alone, i " << i;
          ASSERT_NEAR(scalar[i], want_exact[i], 2e-5 * (1 + std::fabs(want_exact[i]))) << "scalar i " << i;
          if (!attention_has_tiled_kernel(k_type(), v_type(), c.head_dim)) {
            ASSERT_EQ(got, rows[size_t(h) * qh + i]) << "gathered rows, i " << i;
          }
        }
      }
    }
  // Typical error (outputs are ~N(0, 1) values' weighted means): far below one q8_0 step of V
  // (~0.02 for such values).
  std::printf("tiled vs naive: max %.3g, rms %.3g over %lld outputs\n", max_err, std::sqrt(sum_sq / double(count)),
              static_cast<long long>(count));
  EXPECT_LT(std::sqrt(sum_sq / double(count)), 3e-5);
}

// attention_partial_heads_chunks (one walk over a range, the batched decode's path) gives every
// chunk's states bit for bit as one attention_partial_heads call per chunk, on the tiled planes
// and on the rows: ranges of one to four chunks that start and end mid-chunk and mid-tile.
TEST_P(TiledAttention, ChunksInOneWalkEqualOneCallPerChunk) {
  constexpr int64_t C = kAttentionChunk;
  const int hd = 64, nh = 3, group = 3;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 7},
                            {0, C},
                            {5, C + 1},
                            {0, 2 * C + 40},
                            {C + 3, 3 * C + 17},
                            {37, 4 * C - 9}}) {
    Arena a(16, nh, hd, k_type(), v_type(), end, uint32_t(begin + end));
    const TiledArena t(a);
    for (int64_t b = 0; b < begin / 16; ++b) a.table[size_t(b)] = -1;
    const auto q = random_q(nh * group, hd, uint32_t(end), 2.0f);
    const size_t all = attention_partial_floats(group, hd) * size_t(nh);
    const int64_t chunks = attention_num_chunks(begin, end);
    for (const PagedKvView& v : {t.view(), a.view()}) {
      std::vector<float> walk(size_t(chunks) * all), one(all);
      attention_partial_heads_chunks(v, begin, end, 0, nh, q.data(), group, 0.125f, walk.data());
      for (int64_t c = 0; c < chunks; ++c) {
        attention_partial_heads(v, attention_chunk_begin(begin, c), attention_chunk_end(begin, end, c), 0, nh,
                                q.data(), group, 0.125f, one.data());
        ASSERT_EQ(0, std::memcmp(one.data(), &walk[size_t(c) * all], all * sizeof(float)))
            << (v.tiled ? "tiled" : "rows") << " [" << begin << "," << end << ") chunk " << c;
      }
    }
  }
}

// The slots of the last tile past `end` may hold anything (a block being filled, a released
// sequence's bytes): codes and scales of all ones there (f16 NaN scales) change nothing.
TEST_P(TiledAttention, UnusedSlotsAreNeverUsed) {
  const int hd = 64, nh = 3, group = 3, bs = 16;
  for (int64_t end : {1, 7, 40}) {
    Arena a(bs, nh, hd, k_type(), v_type(), end, uint32_t(end));
    TiledArena clean(a), dirty(a);
    std::vector<uint8_t> junk(std::max(kv_row_bytes(k_type(), hd), kv_row_bytes(v_type(), hd)), 0xFF);
    const int32_t block = a.table[size_t((end - 1) / bs)];
    for (int slot = int(end % bs); end % bs != 0 && slot < bs; ++slot)
      for (int h = 0; h < nh; ++h)
        for (int part = 0; part < 2; ++part)
          kv_tiled_store_row(part ? v_type() : k_type(), part == 1, dirty.plane(block, part), nh, hd, slot, h,
                             junk.data());
    const auto q = random_q(nh * group, hd, 5, 2.0f);
    std::vector<float> want(q.size()), got(q.size());
    attention_group_range_heads(clean.view(), 0, end, 0, nh, q.data(), group, 0.125f, want.data());
    attention_group_range_heads(dirty.view(), 0, end, 0, nh, q.data(), group, 0.125f, got.data());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(got[i], want[i]) << "end " << end << " i " << i;
  }
}

// The AVX2 tiled kernel takes every pair of q8_0 / q4_0 planes at head_dim 64 and declines other
// views (head_dim 128 tiled, or planes in rows: those take the other paths); where it runs, the
// AVX2 path's states are its own.
TEST(TiledAttentionAvx2, RunsForTiledPlanesOfHeadDim64) {
  attention_pin_isa(Isa::kAvx2);
  const int nh = 3, group = 3;
  const int64_t end = 200;
  for (const TypePair t : kTypePairs)
    for (int hd : {64, 128}) {
      Arena a(16, nh, hd, t.k, t.v, end, 11);
      const TiledArena tiled(a);
      const auto q = random_q(nh * group, hd, 12, 2.0f);
      const size_t all = attention_partial_floats(group, hd) * size_t(nh);
      std::vector<float> direct(all), path(all);
      const bool ran = detail::attention_tiled_heads_avx2(tiled.view(), 3, end, 0, nh, q.data(), group,
                                                          0.125f, direct.data(), 0, false);
      EXPECT_EQ(ran, hd == 64) << name(t.k) << "/" << name(t.v) << " hd " << hd;
      EXPECT_EQ(attention_has_tiled_kernel(t.k, t.v, hd), hd == 64);
      EXPECT_FALSE(detail::attention_tiled_heads_avx2(a.view(), 3, end, 0, nh, q.data(), group, 0.125f,
                                                      direct.data(), 0, false));
      if (!ran) continue;
      attention_partial_heads(tiled.view(), 3, end, 0, nh, q.data(), group, 0.125f, path.data());
      EXPECT_EQ(0, std::memcmp(direct.data(), path.data(), all * sizeof(float)));
    }
  attention_pin_isa(Isa::kScalar);
}

}  // namespace
}  // namespace kvserve
