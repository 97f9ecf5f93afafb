#include "kvcache/kv_layout.h"

#include <gtest/gtest.h>

#include "util/units.h"

namespace kvserve {
namespace {

KvLayout make_layout(int layers, int kv_heads, int head_dim, int block_size, KvDType dtype) {
  KvLayout l;
  l.num_layers = layers;
  l.num_kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.set_dtype(dtype);
  return l;
}

TEST(KvDType, NamesRoundTrip) {
  for (KvDType d : kAllKvDTypes) {
    auto parsed = parse_kv_dtype(kv_dtype_name(d));
    ASSERT_TRUE(parsed.ok()) << kv_dtype_name(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*parse_kv_dtype("F16"), KvDType::F16);
  EXPECT_EQ(*parse_kv_dtype("Q4_0"), KvDType::Q4_0);
  EXPECT_EQ(parse_kv_dtype("q8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_kv_dtype("q4_1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(parse_kv_dtype("").ok());
}

TEST(KvDType, Sizes) {
  EXPECT_EQ(kv_dtype_bytes(KvDType::F32), 4u);
  EXPECT_EQ(kv_dtype_bytes(KvDType::F16), 2u);
  EXPECT_EQ(kv_dtype_row_bytes(KvDType::F16, 128), 256u);
  EXPECT_EQ(kv_dtype_row_bytes(KvDType::F32, 0), 0u);
  EXPECT_EQ(kv_dtype_bytes(KvDType::BF16), 2u);
  EXPECT_EQ(kv_dtype_row_bytes(KvDType::BF16, 64), 128u);
}

// The documented formula: groups of 32 (the last one shorter), each an f16 scale + values.
TEST(KvDType, QuantizedRowBytes) {
  struct Case { int n; size_t q8, q4; } cases[] = {
      {32, 34, 18},           // one GGUF block
      {64, 68, 36},           // SmolLM / TinyLlama heads
      {128, 136, 72},         // Llama heads
      {8, 10, 6},             // stories260K: one short group of 8
      {5, 7, 5},              // odd: 2 + ceil(5/2)
      {80, 3 * 2 + 80, 3 * 2 + 32 + 8},  // 32 + 32 + 16
      {33, 4 + 33, 4 + 16 + 1},
      {1, 3, 3},
      {0, 0, 0}};
  for (const Case& c : cases) {
    EXPECT_EQ(kv_dtype_row_bytes(KvDType::Q8_0, c.n), c.q8) << c.n;
    EXPECT_EQ(kv_dtype_row_bytes(KvDType::Q4_0, c.n), c.q4) << c.n;
  }
  EXPECT_TRUE(kv_dtype_is_quantized(KvDType::Q8_0));
  EXPECT_FALSE(kv_dtype_is_quantized(KvDType::BF16));
}

// K and V of different types: planes of different sizes, K first in each layer.
TEST(KvLayout, MixedKAndVTypes) {
  KvLayout l = make_layout(2, 3, 64, 16, KvDType::F32);
  l.k_dtype = KvDType::Q8_0;
  l.v_dtype = KvDType::Q4_0;
  EXPECT_EQ(l.head_row_bytes(KvPart::kKey), 68u);
  EXPECT_EQ(l.head_row_bytes(KvPart::kValue), 36u);
  EXPECT_EQ(l.bytes_per_token(), 2u * 3u * (68u + 36u));
  EXPECT_EQ(l.block_bytes(), 16u * l.bytes_per_token());
  EXPECT_EQ(l.part_offset(KvPart::kKey), 0u);
  EXPECT_EQ(l.part_offset(KvPart::kValue), 16u * 3u * 68u);
  EXPECT_EQ(l.layer_block_bytes(), 16u * 3u * (68u + 36u));
  EXPECT_EQ(l.num_layers * l.layer_block_bytes(), l.block_bytes());
  EXPECT_EQ(l.type_signature(), "k=q8_0,v=q4_0,bs=16");
  l.set_dtype(KvDType::F16);
  EXPECT_EQ(l.type_signature(), "k=f16,v=f16,bs=16");
  // q8_0 vs f16 for SmolLM-135M's shape (30 layers, 3 KV heads of 64): 68 / 128 of the bytes.
  KvLayout smol = make_layout(30, 3, 64, 16, KvDType::Q8_0);
  EXPECT_EQ(smol.bytes_per_token(), 2u * 30u * 3u * 68u);
}

TEST(KvLayout, BytesPerTokenForKnownShapes) {
  // Llama-2-7B: 32 layers, 32 KV heads of 128, f16 -> 2 * 32 * 32 * 128 * 2 = 512 KiB per token.
  EXPECT_EQ(make_layout(32, 32, 128, 16, KvDType::F16).bytes_per_token(), 524288u);
  // TinyLlama-1.1B (GQA, 4 KV heads of 64), f32: 2 * 22 * 4 * 64 * 4.
  EXPECT_EQ(make_layout(22, 4, 64, 16, KvDType::F32).bytes_per_token(), 45056u);
  // Llama-3-8B: 32 layers, 8 KV heads of 128, f16: 128 KiB per token.
  EXPECT_EQ(make_layout(32, 8, 128, 16, KvDType::F16).bytes_per_token(), 131072u);
  // A toy shape with odd sizes.
  EXPECT_EQ(make_layout(3, 1, 5, 7, KvDType::F32).bytes_per_token(), size_t(2 * 3 * 1 * 5 * 4));
}

TEST(KvLayout, BlockGeometry) {
  KvLayout l = make_layout(2, 4, 8, 16, KvDType::F16);
  const KvPart K = KvPart::kKey;
  EXPECT_EQ(l.head_row_bytes(K), 16u);     // 8 halfs
  EXPECT_EQ(l.slot_bytes(K), 64u);         // 4 heads
  EXPECT_EQ(l.plane_bytes(K), 16u * 64u);  // 16 tokens
  EXPECT_EQ(l.block_bytes(), 16u * l.bytes_per_token());
  EXPECT_EQ(l.block_bytes(), 4u * l.plane_bytes(K));  // 2 layers x (K, V)
  EXPECT_EQ(l.part_offset(KvPart::kKey), 0u);
  EXPECT_EQ(l.part_offset(KvPart::kValue), l.plane_bytes(K));
  EXPECT_EQ(l.layer_block_bytes(), 2 * l.plane_bytes(K));
}

// The tiled layout (q8_0 or q4_0 K and V only, head_dim % 32, block_size % 16): the same bytes, its
// own type signature (blocks of the two layouts are not interchangeable), refused where it cannot apply.
TEST(KvLayout, TiledOnlyWhereItApplies) {
  KvLayout l = make_layout(30, 3, 64, 16, KvDType::Q8_0);
  EXPECT_TRUE(l.can_tile());
  const size_t rows_bytes = l.block_bytes();
  l.tiled = true;
  EXPECT_TRUE(l.validate().ok());
  EXPECT_EQ(l.block_bytes(), rows_bytes);
  EXPECT_EQ(l.type_signature(), "k=q8_0,v=q8_0,bs=16,tiled2");
  for (KvLayout bad : {make_layout(1, 1, 64, 8, KvDType::Q8_0), make_layout(1, 1, 40, 16, KvDType::Q8_0),
                       make_layout(1, 1, 64, 16, KvDType::F16), make_layout(1, 1, 64, 16, KvDType::BF16)}) {
    EXPECT_FALSE(bad.can_tile()) << bad.type_signature();
    bad.tiled = true;
    EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument) << bad.type_signature();
  }
  KvLayout q4 = make_layout(2, 2, 64, 32, KvDType::Q4_0);
  const size_t q4_rows_bytes = q4.block_bytes();
  q4.tiled = true;
  EXPECT_TRUE(q4.validate().ok());
  EXPECT_EQ(q4.block_bytes(), q4_rows_bytes);
  EXPECT_EQ(q4.type_signature(), "k=q4_0,v=q4_0,bs=32,tiled2");
  KvLayout mixed = make_layout(1, 1, 64, 16, KvDType::Q8_0);
  mixed.v_dtype = KvDType::Q4_0;
  EXPECT_TRUE(mixed.can_tile());
  mixed.v_dtype = KvDType::F16;
  EXPECT_FALSE(mixed.can_tile());
}

TEST(KvLayout, ValidateNamesTheBadField) {
  EXPECT_TRUE(make_layout(1, 1, 1, 1, KvDType::F32).validate().ok());
  struct Case {
    KvLayout layout;
    const char* field;
  } cases[] = {{make_layout(0, 1, 1, 16, KvDType::F32), "num_layers"},
               {make_layout(1, -1, 1, 16, KvDType::F32), "num_kv_heads"},
               {make_layout(1, 1, 0, 16, KvDType::F32), "head_dim"},
               {make_layout(1, 1, 1, 0, KvDType::F32), "block_size"}};
  for (const Case& c : cases) {
    Status s = c.layout.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
  Status huge = make_layout(1 << 30, 1 << 30, 1 << 30, 1 << 30, KvDType::F32).validate();
  EXPECT_EQ(huge.code(), StatusCode::kInvalidArgument) << huge.to_string();
}

TEST(KvLayout, BlocksFromByteBudget) {
  KvLayout l = make_layout(2, 4, 8, 16, KvDType::F16);  // 4 KiB blocks
  ASSERT_EQ(l.block_bytes(), 4096u);
  EXPECT_EQ(*num_blocks_for_bytes(l, 4096), 1);
  EXPECT_EQ(*num_blocks_for_bytes(l, 4096 * 10 + 4095), 10);  // floor
  EXPECT_EQ(num_blocks_for_bytes(l, 4095).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*num_blocks_for_memory(l, "512MiB"), 512 * 1024 / 4);
  EXPECT_EQ(*num_blocks_for_memory(l, "1MB"), 1000000 / 4096);
  EXPECT_FALSE(num_blocks_for_memory(l, "lots").ok());
  // A huge budget is capped at the int32 id space rather than wrapping.
  EXPECT_EQ(*num_blocks_for_bytes(make_layout(1, 1, 1, 1, KvDType::F16), uint64_t(1) << 40), INT32_MAX);
  EXPECT_FALSE(num_blocks_for_bytes(make_layout(0, 1, 1, 1, KvDType::F16), 1 << 20).ok());
}

TEST(KvLayout, BlocksFromRamFraction) {
  KvLayout l = make_layout(2, 4, 8, 16, KvDType::F16);
  uint64_t ram = physical_memory_bytes();
  ASSERT_GT(ram, 0u);
  auto n = num_blocks_for_memory(l, "0.5");
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  uint64_t expected = uint64_t(0.5 * double(ram)) / l.block_bytes();
  EXPECT_EQ(uint64_t(*n), std::min<uint64_t>(expected, INT32_MAX));
}

TEST(KvLayout, BlocksFromTokenCount) {
  KvLayout l = make_layout(1, 1, 4, 16, KvDType::F32);
  EXPECT_EQ(*num_blocks_for_tokens(l, 0), 1);
  EXPECT_EQ(*num_blocks_for_tokens(l, 1), 1);
  EXPECT_EQ(*num_blocks_for_tokens(l, 16), 1);
  EXPECT_EQ(*num_blocks_for_tokens(l, 17), 2);
  EXPECT_EQ(*num_blocks_for_tokens(l, 4096), 256);
  EXPECT_FALSE(num_blocks_for_tokens(l, -1).ok());
  l.block_size = 1;
  EXPECT_EQ(*num_blocks_for_tokens(l, 4097), 4097);
  EXPECT_FALSE(num_blocks_for_tokens(l, int64_t(1) << 40).ok());
}

}  // namespace
}  // namespace kvserve
