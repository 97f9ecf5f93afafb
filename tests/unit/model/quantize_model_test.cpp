// kvserve quantize: every scheme on the tiny F32 models loads, keeps the metadata, and gives
// logits within the per-encoding NMSE the golden README measured for the reference quantizer.
#include "model/quantize_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "gguf/gguf_file.h"
#include "model_test_util.h"

namespace kvserve {
namespace {

using testing::TempDir;

struct Case {
  const char* type;
  double max_nmse;
  uint32_t file_type;
};

// Thresholds: the golden README's reference NMSE per encoding, with headroom where our simpler
// quantizers may round differently.
const Case kCases[] = {
    {"f32", 1e-9, 0},     {"f16", 1e-5, 1},      {"bf16", 1e-3, 32},    {"q8_0", 1.8e-3, 7},
    {"q6_k", 1.2e-2, 18}, {"q5_k_m", 3.9e-2, 17}, {"q4_k_m", 1.4e-1, 15}, {"q5_0", 0.5, 8},
    {"q4_0", 1.3, 2},
};

void check_model(const std::string& src, const std::string& golden, const std::vector<const char*>& types) {
  testing::GoldenLogits g;
  ASSERT_TRUE(testing::read_golden(testing::shared_path(golden), &g)) << golden;
  auto ref_model = Model::load(testing::shared_path(src));
  ASSERT_TRUE(ref_model.ok()) << ref_model.status().to_string();
  auto ref = testing::model_logits(**ref_model, g.tokens);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  // Our own f32 logits stand in for the reference's; they must agree with the golden file.
  EXPECT_LT(testing::nmse(*ref, g.logits), 1e-5);
  auto in = GgufFile::open(testing::shared_path(src));
  ASSERT_TRUE(in.ok());

  TempDir dir;
  for (const Case& c : kCases) {
    if (std::find_if(types.begin(), types.end(), [&](const char* t) { return std::string(t) == c.type; }) ==
        types.end())
      continue;
    SCOPED_TRACE(std::string(src) + " -> " + c.type);
    auto scheme = parse_quant_scheme(c.type);
    ASSERT_TRUE(scheme.ok());
    const std::string out = dir.file(std::string(c.type) + ".gguf");
    int lines = 0;
    auto st = quantize_model(testing::shared_path(src), out, *scheme, 2, [&](const TensorReport&) { ++lines; });
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(size_t(lines), (*in)->tensors().size());
    EXPECT_EQ(size_t(st->num_tensors), (*in)->tensors().size());

    auto f = GgufFile::open(out);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ((*f)->get_int_or("general.file_type", -1), int64_t(c.file_type));
    // Metadata unchanged apart from general.file_type.
    for (const auto& [key, value] : (*in)->metadata()) {
      if (key == "general.file_type") continue;
      const GgufValue* v = (*f)->find(key);
      ASSERT_NE(v, nullptr) << key;
      EXPECT_EQ(v->to_string(1000000), value.to_string(1000000)) << key;
    }
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      if (t.n_dims == 1) {
        EXPECT_EQ(t.type, GgmlType::F32) << t.name;
      }
    }

    auto m = Model::load(out);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto logits = testing::model_logits(**m, g.tokens);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    const double e = testing::nmse(*logits, *ref);
    std::printf("  %-14s %-7s NMSE %.4g (limit %.3g)\n", src.c_str() + src.rfind('/') + 1, c.type, e, c.max_nmse);
    EXPECT_LT(e, c.max_nmse);
  }
}

TEST(QuantizeModel, TinyLlamaEveryType) {
  check_model("models/tiny/tiny-llama-f32.gguf", "golden/logits/tiny-llama-f32.t1.bin",
              {"f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q5_0", "q4_0"});
}

TEST(QuantizeModel, TinyQwen2EveryType) {
  check_model("models/tiny/tiny-qwen2-f32.gguf", "golden/logits/tiny-qwen2-f32.t2.bin",
              {"f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q5_0", "q4_0"});
}

TEST(QuantizeModel, RecipeTypes) {
  auto s = parse_quant_scheme("Q4_K_M");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->name, "q4_k_m");
  EXPECT_EQ(pick_tensor_type(*s, "output.weight", {256, 512}, 2, false), GgmlType::Q6_K);
  EXPECT_EQ(pick_tensor_type(*s, "token_embd.weight", {256, 512}, 2, false), GgmlType::Q4_K);
  EXPECT_EQ(pick_tensor_type(*s, "token_embd.weight", {256, 512}, 2, true), GgmlType::Q6_K);
  EXPECT_EQ(pick_tensor_type(*s, "blk.0.attn_q.weight", {576, 576}, 30, false), GgmlType::Q5_0);
  EXPECT_EQ(pick_tensor_type(*s, "blk.0.attn_norm.weight", {256}, 2, false), GgmlType::F32);
  EXPECT_EQ(pick_tensor_type(*s, "blk.0.attn_q.weight", {48, 16}, 2, false), GgmlType::F16);
  auto q6 = parse_quant_scheme("q6_k");
  EXPECT_EQ(pick_tensor_type(*q6, "blk.0.attn_q.weight", {576, 576}, 30, false), GgmlType::Q8_0);
}

TEST(QuantizeModel, Errors) {
  TempDir dir;
  auto s = parse_quant_scheme("q8_0");
  ASSERT_TRUE(s.ok());
  auto r = quantize_model(dir.file("missing.gguf"), dir.file("out.gguf"), *s, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing.gguf"), std::string::npos);
  auto bad = parse_quant_scheme("q9_9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("q4_k_m"), std::string::npos);
}

// Quantizing is lossy, so OUT naming the input file (itself or through a link) is refused and the
// input is left as it was.
TEST(QuantizeModel, RefusesToWriteOverItsInput) {
  TempDir dir;
  const std::string src = dir.file("model.gguf");
  std::filesystem::copy_file(testing::shared_path("models/tiny/tiny-llama-f32.gguf"), src);
  const auto size = std::filesystem::file_size(src);
  const std::string link = dir.file("link.gguf");
  std::filesystem::create_symlink(src, link);
  auto s = parse_quant_scheme("q8_0");
  ASSERT_TRUE(s.ok());
  for (const std::string& out : {src, link}) {
    auto r = quantize_model(src, out, *s, 1);
    ASSERT_FALSE(r.ok()) << out;
    EXPECT_NE(r.status().message().find("is the input file"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(std::filesystem::file_size(src), size);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
}

}  // namespace
}  // namespace kvserve
