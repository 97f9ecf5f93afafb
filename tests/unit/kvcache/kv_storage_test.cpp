#include "kvcache/kv_storage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace kvserve {
namespace {

KvLayout small_layout(KvDType dtype, int block_size) {
  KvLayout l;
  l.num_layers = 3;
  l.num_kv_heads = 2;
  l.head_dim = 5;  // odd on purpose: planes are not multiples of 64 bytes
  l.block_size = block_size;
  l.set_dtype(dtype);
  return l;
}

TEST(KvStorage, SizeAlignmentAndZeroFill) {
  for (KvDType dtype : kAllKvDTypes) {
    KvLayout l = small_layout(dtype, 16);
    auto s = KvStorage::create(l, 7);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->num_blocks(), 7);
    EXPECT_EQ(s->total_bytes(), 7 * l.block_bytes());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % KvStorage::kAlignment, 0u);
    const uint8_t* p = s->data();
    EXPECT_TRUE(std::all_of(p, p + s->total_bytes(), [](uint8_t b) { return b == 0; }));
  }
}

TEST(KvStorage, RejectsBadArguments) {
  EXPECT_EQ(KvStorage::create(small_layout(KvDType::F32, 16), 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(KvStorage::create(small_layout(KvDType::F32, 16), -3).status().code(),
            StatusCode::kInvalidArgument);
  KvLayout bad = small_layout(KvDType::F32, 16);
  bad.head_dim = 0;
  EXPECT_EQ(KvStorage::create(bad, 4).status().code(), StatusCode::kInvalidArgument);
}

// Every (block, layer, K/V) plane lies inside the arena, and together they tile it exactly:
// sorted by offset, each starts where the previous ended, with no gap or overlap.
TEST(KvStorage, PlanesAreDisjointAndTileTheArena) {
  for (int block_size : {1, 16, 32}) {
    for (KvDType dtype : kAllKvDTypes) {
      KvLayout l = small_layout(dtype, block_size);
      l.v_dtype = dtype == KvDType::Q8_0 ? KvDType::Q4_0 : l.v_dtype;  // one mixed K/V layout too
      auto s = KvStorage::create(l, 5);
      ASSERT_TRUE(s.ok());
      std::vector<std::pair<const uint8_t*, const uint8_t*>> planes;  // [begin, end)
      const KvStorage& cs = *s;
      for (int32_t b = 0; b < cs.num_blocks(); ++b)
        for (int layer = 0; layer < l.num_layers; ++layer) {
          planes.emplace_back(cs.k_block(b, layer), cs.k_block(b, layer) + l.plane_bytes(KvPart::kKey));
          planes.emplace_back(cs.v_block(b, layer), cs.v_block(b, layer) + l.plane_bytes(KvPart::kValue));
          EXPECT_EQ(cs.k_block(b, layer), s->k_block(b, layer));  // const and mutable agree
          EXPECT_EQ(cs.v_block(b, layer), s->v_block(b, layer));
        }
      std::sort(planes.begin(), planes.end());
      const uint8_t* cursor = cs.data();
      for (const auto& [begin, end] : planes) {
        ASSERT_EQ(begin, cursor) << "gap or overlap at byte " << (begin - cs.data());
        cursor = end;
      }
      EXPECT_EQ(cursor, cs.data() + cs.total_bytes());
    }
  }
}

TEST(KvStorage, DocumentedOffsets) {
  KvLayout l = small_layout(KvDType::F16, 16);
  auto s = KvStorage::create(l, 4);
  ASSERT_TRUE(s.ok());
  // Layer-major: block 2, layer 1, V: skip layer 0 of all 4 blocks and layer 1 of blocks 0 and 1
  // (K and V each), then block 2's layer-1 K plane.
  EXPECT_EQ(s->plane_offset(2, 1, KvPart::kValue), (4 + 2) * l.layer_block_bytes() + l.plane_bytes(KvPart::kKey));
  // Consecutive blocks of one layer are adjacent (what the attention kernels stream through).
  EXPECT_EQ(s->k_block(3, 1) - s->k_block(2, 1), std::ptrdiff_t(s->block_stride()));
  EXPECT_EQ(s->v_block(2, 1) - s->data(), std::ptrdiff_t(s->plane_offset(2, 1, KvPart::kValue)));
}

// Writing a whole plane leaves every other byte untouched (a second check of disjointness that
// also catches a plane shorter than plane_bytes() under ASan).
TEST(KvStorage, WritesStayInTheirPlane) {
  KvLayout l = small_layout(KvDType::F32, 16);
  auto s = KvStorage::create(l, 3);
  ASSERT_TRUE(s.ok());
  std::memset(s->v_block(1, 2), 0xab, l.plane_bytes(KvPart::kValue));
  size_t begin = s->plane_offset(1, 2, KvPart::kValue);
  for (size_t i = 0; i < s->total_bytes(); ++i) {
    bool inside = i >= begin && i < begin + l.plane_bytes(KvPart::kValue);
    ASSERT_EQ(s->data()[i], inside ? 0xab : 0) << "byte " << i;
  }
}

TEST(KvStorage, MoveTransfersOwnership) {
  auto made = KvStorage::create(small_layout(KvDType::F16, 16), 2);
  ASSERT_TRUE(made.ok());
  KvStorage a = std::move(made).value();
  uint8_t* p = a.data();
  KvStorage b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(a.total_bytes(), 0u);
  auto other = KvStorage::create(small_layout(KvDType::F32, 1), 1);
  ASSERT_TRUE(other.ok());
  b = std::move(other).value();  // frees the old arena (ASan would report a leak otherwise)
  EXPECT_EQ(b.num_blocks(), 1);
}

TEST(KvStorageDeathTest, OutOfRangeAccessAsserts) {
  auto s = KvStorage::create(small_layout(KvDType::F32, 16), 2);
  ASSERT_TRUE(s.ok());
  EXPECT_DEATH((void)s->k_block(2, 0), "block id out of range");
  EXPECT_DEATH((void)s->v_block(-1, 0), "block id out of range");
  EXPECT_DEATH((void)s->k_block(0, 3), "layer out of range");
}

}  // namespace
}  // namespace kvserve
