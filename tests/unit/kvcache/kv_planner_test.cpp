// The planner's figures against the formula written out by hand for several shapes, including
// the deployment guide's example (batch 32, sequence 2048, 16 heads x 64, fp16: 256 MiB/layer).
#include "kvcache/kv_planner.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

KvLayout shape(int layers, int heads, int dim, KvDType k, KvDType v, int block = 16) {
  KvLayout l;
  l.num_layers = layers;
  l.num_kv_heads = heads;
  l.head_dim = dim;
  l.block_size = block;
  l.k_dtype = k;
  l.v_dtype = v;
  return l;
}

TEST(KvPlanner, GuideExampleIs256MiBPerLayer) {
  KvPlanInput in;
  in.layout = shape(1, 16, 64, KvDType::F16, KvDType::F16);
  in.seq_len = 2048;
  in.batch = 32;
  auto p = plan_kv(in);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->batch_bytes_per_layer, 32ull * 2048 * 2 * 16 * 64 * 2);
  EXPECT_EQ(p->batch_bytes_per_layer, 256 * kMiB);
  EXPECT_EQ(format_plan_bytes(p->batch_bytes_per_layer), "256 MiB");
  EXPECT_EQ(p->bytes_per_token, 2u * 16 * 64 * 2);
  EXPECT_TRUE(p->fits);  // no budget given: exactly the batch is planned
  EXPECT_EQ(p->max_sequences, 32);
  // 24 layers of the same: 24 x 256 MiB = 6 GiB.
  in.layout.num_layers = 24;
  p = plan_kv(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->batch_bytes, 6 * kGiB);
}

TEST(KvPlanner, BytesPerTokenFollowTheFormulaForFloatTypes) {
  struct Case {
    int layers, heads, dim;
    KvDType t;
    size_t elem;
  } cases[] = {{32, 32, 128, KvDType::F16, 2}, {32, 8, 128, KvDType::F16, 2}, {5, 4, 8, KvDType::F32, 4},
               {30, 3, 64, KvDType::BF16, 2}, {28, 2, 64, KvDType::F32, 4}};
  for (const Case& c : cases) {
    KvPlanInput in;
    in.layout = shape(c.layers, c.heads, c.dim, c.t, c.t);
    in.seq_len = 1000;
    auto p = plan_kv(in);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->bytes_per_token, 2u * c.layers * c.heads * c.dim * c.elem) << c.layers << "x" << c.heads;
    EXPECT_EQ(p->blocks_per_sequence, 63);  // ceil(1000 / 16)
    EXPECT_EQ(p->bytes_per_sequence, 63u * 16 * p->bytes_per_token);
  }
  // Llama-2-7B, f16: the well-known 512 KiB per token; Llama-3-8B (8 KV heads): 128 KiB.
  KvPlanInput in;
  in.seq_len = 4096;
  in.layout = shape(32, 32, 128, KvDType::F16, KvDType::F16);
  EXPECT_EQ(plan_kv(in)->bytes_per_token, 512u * 1024);
  in.layout = shape(32, 8, 128, KvDType::F16, KvDType::F16);
  EXPECT_EQ(plan_kv(in)->bytes_per_token, 128u * 1024);
}

TEST(KvPlanner, QuantizedTypesAddTheirScales) {
  // head_dim 128: q8_0 rows are 4 groups x (2 + 32) = 136 bytes, q4_0 rows 4 x (2 + 16) = 72.
  KvPlanInput in;
  in.seq_len = 16;
  in.layout = shape(2, 4, 128, KvDType::Q8_0, KvDType::Q8_0);
  EXPECT_EQ(plan_kv(in)->bytes_per_token, 2u * 4 * 136 * 2);
  in.layout = shape(2, 4, 128, KvDType::Q4_0, KvDType::Q4_0);
  EXPECT_EQ(plan_kv(in)->bytes_per_token, 2u * 4 * 72 * 2);
  // K8V4: keys and values sized apart.
  in.layout = shape(2, 4, 128, KvDType::Q8_0, KvDType::Q4_0);
  auto p = plan_kv(in);
  EXPECT_EQ(p->k_bytes_per_token_layer, 4u * 136);
  EXPECT_EQ(p->v_bytes_per_token_layer, 4u * 72);
  EXPECT_EQ(p->bytes_per_token, 2u * 4 * (136 + 72));
  // head_dim 8 (stories260K): one short group, q8_0 2 + 8 = 10 bytes, q4_0 2 + 4 = 6.
  in.layout = shape(5, 4, 8, KvDType::Q8_0, KvDType::Q4_0);
  EXPECT_EQ(plan_kv(in)->bytes_per_token, 5u * 4 * (10 + 6));
  // Always the same as kv_dtype_row_bytes, whatever the type.
  for (KvDType t : kAllKvDTypes) {
    in.layout = shape(3, 2, 80, t, t);
    EXPECT_EQ(plan_kv(in)->bytes_per_token, 3u * 2 * 2 * kv_dtype_row_bytes(t, 80)) << kv_dtype_name(t);
  }
}

TEST(KvPlanner, BudgetGivesBlocksAndConcurrentSequences) {
  KvPlanInput in;
  in.layout = shape(4, 2, 64, KvDType::F16, KvDType::F16, 16);  // 2 KiB per token, 32 KiB per block
  in.seq_len = 1000;                                             // 63 blocks per sequence
  in.kv_budget_bytes = 10 * kMiB;                                // 320 blocks
  in.available_bytes = 16 * kMiB;
  in.weight_bytes = 4 * kMiB;
  auto p = plan_kv(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->block_bytes, 32u * 1024);
  EXPECT_EQ(p->num_blocks, 320);
  EXPECT_EQ(p->max_sequences, 5);  // 320 / 63
  EXPECT_TRUE(p->fits);
  EXPECT_DOUBLE_EQ(p->budget_fraction, 10.0 / 16.0);
  EXPECT_EQ(p->left_bytes, int64_t(6 * kMiB));
  EXPECT_EQ(p->left_after_weights, int64_t(2 * kMiB));
  EXPECT_TRUE(p->warnings.empty());  // 62.5% is inside 50-70%
}

TEST(KvPlanner, WarnsOutsideFiftyToSeventyPercent) {
  KvPlanInput in;
  in.layout = shape(4, 2, 64, KvDType::F16, KvDType::F16);
  in.seq_len = 100;
  in.available_bytes = 100 * kMiB;
  in.kv_budget_bytes = 30 * kMiB;
  auto p = plan_kv(in);
  ASSERT_EQ(p->warnings.size(), 1u);
  EXPECT_NE(p->warnings[0].find("30.0%"), std::string::npos) << p->warnings[0];
  in.kv_budget_bytes = 80 * kMiB;
  in.weight_bytes = 30 * kMiB;  // 20 MiB left: the weights do not fit either
  p = plan_kv(in);
  EXPECT_EQ(p->warnings.size(), 2u);
  EXPECT_TRUE(p->fits);  // warnings only
  // No budget given: the plan sizes exactly what is asked for; no fraction to judge.
  in.kv_budget_bytes = 0;
  in.weight_bytes = 0;
  p = plan_kv(in);
  EXPECT_TRUE(p->warnings.empty());
  EXPECT_EQ(p->kv_budget_bytes, p->bytes_per_sequence);
}

TEST(KvPlanner, FailsWhenOneFullSequenceCannotFit) {
  KvPlanInput in;
  in.layout = shape(4, 2, 64, KvDType::F16, KvDType::F16, 16);  // 32 KiB per block
  in.seq_len = 2048;                                             // 128 blocks = 4 MiB
  in.kv_budget_bytes = 4 * kMiB - 1;
  auto p = plan_kv(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_EQ(p->max_sequences, 0);
  EXPECT_NE(p->error.find("128 blocks"), std::string::npos) << p->error;
  EXPECT_NE(p->error.find("2048 tokens"), std::string::npos) << p->error;
  in.kv_budget_bytes = 4 * kMiB;
  EXPECT_TRUE(plan_kv(in)->fits);
  // A batch that does not fit is refused too.
  in.batch = 2;
  p = plan_kv(in);
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->error.find("batch of 2"), std::string::npos) << p->error;
}

TEST(KvPlanner, RejectsInvalidInput) {
  KvPlanInput in;
  in.layout = shape(0, 2, 64, KvDType::F16, KvDType::F16);
  in.seq_len = 10;
  EXPECT_FALSE(plan_kv(in).ok());
  in.layout.num_layers = 2;
  in.seq_len = 0;
  EXPECT_FALSE(plan_kv(in).ok());
  in.seq_len = 10;
  in.batch = -1;
  EXPECT_FALSE(plan_kv(in).ok());
}

TEST(KvPlanner, FormatsExactUnitsAsIntegers) {
  EXPECT_EQ(format_plan_bytes(256 * kMiB), "256 MiB");
  EXPECT_EQ(format_plan_bytes(3 * kGiB), "3 GiB");
  EXPECT_EQ(format_plan_bytes(512), "512 bytes");
  EXPECT_EQ(format_plan_bytes(1024), "1 KiB");
  EXPECT_EQ(format_plan_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_plan_bytes(24683548ull * 1024), "23.54 GiB");
}

}  // namespace
}  // namespace kvserve
