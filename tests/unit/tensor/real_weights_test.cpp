// Cross-checks against files written by the reference engine (../shared/models/tiny): the same
// random network stored as f32 and in several quantized encodings. Decoding a quantized tensor
// must land close to the f32 original (a wrong bit layout gives errors of order 1), and our own
// weight quantizers must do about as well as the reference's on the same data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tensor/quants.h"

namespace kvserve {
namespace {

std::string model_path(const std::string& name) { return std::string(KVS_SHARED_DIR) + "/models/tiny/" + name; }

std::shared_ptr<GgufFile> open_or_null(const std::string& name) {
  auto f = GgufFile::open(model_path(name));
  return f.ok() ? f.value() : nullptr;
}

std::vector<float> decode_tensor(const GgufTensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.nelements()));
  for (int64_t r = 0; r < t.nrows(); ++r)
    dequantize_row(t.type, t.data + size_t(r) * t.row_bytes(), out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

double rel_rmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double e = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    s += double(ref[i]) * ref[i];
  }
  return std::sqrt(e / s);
}

double bound_for(GgmlType t) {
  switch (t) {
    case GgmlType::F16: return 1e-3;
    case GgmlType::BF16: return 5e-3;
    case GgmlType::Q8_0: return 0.01;
    case GgmlType::Q6_K: return 0.04;
    case GgmlType::Q5_K: return 0.07;
    case GgmlType::Q4_K: return 0.13;
    case GgmlType::Q4_0: return 0.17;
    default: return 0.0;
  }
}

TEST(RealWeights, ReferenceFilesDecodeCloseToF32) {
  auto f32 = open_or_null("tiny-llama-f32.gguf");
  if (!f32) GTEST_SKIP() << "no " << model_path("tiny-llama-f32.gguf");
  int checked = 0;
  for (const char* name : {"tiny-llama-f16.gguf", "tiny-llama-bf16.gguf", "tiny-llama-q8_0.gguf",
                           "tiny-llama-q4_0.gguf", "tiny-llama-q4_k_m.gguf", "tiny-llama-q5_k_m.gguf",
                           "tiny-llama-q6_k.gguf"}) {
    auto q = open_or_null(name);
    ASSERT_NE(q, nullptr) << name;
    for (const auto& t : q->tensors()) {
      if (t.type == GgmlType::F32) continue;
      const GgufTensorInfo* ref = f32->find_tensor(t.name);
      ASSERT_NE(ref, nullptr) << t.name;
      ASSERT_TRUE(is_supported_weight_type(t.type)) << name << " " << t.name;
      const double e = rel_rmse(decode_tensor(t), decode_tensor(*ref));
      EXPECT_LT(e, bound_for(t.type)) << name << " " << t.name << " " << ggml_type_name(t.type);
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

// Our quantizers against the reference's on the same f32 tensors: same order of error.
TEST(RealWeights, OwnQuantizersComparableToReference) {
  auto f32 = open_or_null("tiny-llama-f32.gguf");
  if (!f32) GTEST_SKIP() << "no " << model_path("tiny-llama-f32.gguf");
  for (const char* name : {"tiny-llama-q8_0.gguf", "tiny-llama-q4_0.gguf", "tiny-llama-q4_k_m.gguf",
                           "tiny-llama-q5_k_m.gguf", "tiny-llama-q6_k.gguf"}) {
    auto q = open_or_null(name);
    ASSERT_NE(q, nullptr) << name;
    double ours_sum = 0, theirs_sum = 0;
    for (const auto& t : q->tensors()) {
      if (!can_quantize_to(t.type) || t.type == GgmlType::F32) continue;
      const auto original = decode_tensor(*f32->find_tensor(t.name));
      std::vector<uint8_t> buf(t.row_bytes());
      std::vector<float> ours(original.size());
      for (int64_t r = 0; r < t.nrows(); ++r) {
        quantize_row(t.type, original.data() + r * t.ne[0], buf.data(), t.ne[0]);
        dequantize_row(t.type, buf.data(), ours.data() + r * t.ne[0], t.ne[0]);
      }
      const double e_ours = rel_rmse(ours, original), e_theirs = rel_rmse(decode_tensor(t), original);
      EXPECT_LT(e_ours, 1.15 * e_theirs) << name << " " << t.name << " " << ggml_type_name(t.type);
      ours_sum += e_ours;
      theirs_sum += e_theirs;
    }
    std::printf("  %-24s mean rel rmse: ours/reference = %.3f\n", name, ours_sum / theirs_sum);
  }
}

}  // namespace
}  // namespace kvserve
