// kvserve synth: preset shapes and recipe types (dry run), and tiny synthesized models that load
// and run a forward pass with finite logits.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>

#include "gguf/gguf_file.h"
#include "model/synth.h"
#include "model_test_util.h"

namespace kvserve {
namespace {

using testing::TempDir;

QuantScheme scheme(const std::string& name) {
  auto s = parse_quant_scheme(name);
  EXPECT_TRUE(s.ok()) << name;
  return *s;
}

std::map<std::string, SynthTensor> plan_map(const std::string& preset, const std::string& type) {
  auto spec = synth_preset(preset);
  EXPECT_TRUE(spec.ok());
  std::map<std::string, SynthTensor> m;
  for (const SynthTensor& t : synth_tensor_plan(*spec, 32000, scheme(type))) m.emplace(t.name, t);
  return m;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SynthPreset, UnknownNamesTheValidOnes) {
  auto s = synth_preset("gpt-5");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("smollm-135m"), std::string::npos);
  EXPECT_FALSE(parse_quant_scheme("q3_k").ok());
}

TEST(SynthPreset, SmolLmShapesAndFallbacks) {
  auto m = plan_map("smollm-135m", "q4_k_m");
  EXPECT_EQ(m.size(), 1u + 30u * 9u + 1u);  // tied: no output.weight
  EXPECT_EQ(m.count("output.weight"), 0u);
  EXPECT_EQ(m.at("token_embd.weight").ne, (std::vector<int64_t>{576, 32000}));
  // 576 is not a multiple of 256: the tied output wants q6_K and falls back to q8_0,
  // hidden-size inputs want q4_K and fall back to q5_0.
  EXPECT_EQ(m.at("token_embd.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(m.at("blk.3.attn_q.weight").ne, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(m.at("blk.3.attn_q.weight").type, GgmlType::Q5_0);
  EXPECT_EQ(m.at("blk.3.attn_k.weight").ne, (std::vector<int64_t>{576, 192}));
  EXPECT_EQ(m.at("blk.0.attn_v.weight").type, GgmlType::Q8_0);  // q6_K layer, falls back
  EXPECT_EQ(m.at("blk.0.ffn_down.weight").ne, (std::vector<int64_t>{1536, 576}));
  EXPECT_EQ(m.at("blk.0.ffn_down.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.4.ffn_down.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(m.at("blk.6.ffn_down.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.29.ffn_down.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.0.attn_norm.weight").type, GgmlType::F32);
}

TEST(SynthPreset, Llama32Shapes) {
  auto m = plan_map("llama-3.2-1b", "q4_k_m");
  EXPECT_EQ(m.count("output.weight"), 0u);
  EXPECT_EQ(m.at("token_embd.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.5.attn_q.weight").ne, (std::vector<int64_t>{2048, 2048}));
  EXPECT_EQ(m.at("blk.5.attn_q.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(m.at("blk.5.attn_k.weight").ne, (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(m.at("blk.5.ffn_up.weight").ne, (std::vector<int64_t>{2048, 8192}));
  EXPECT_EQ(m.at("blk.5.ffn_down.weight").ne, (std::vector<int64_t>{8192, 2048}));
  int q6 = 0;
  for (int l = 0; l < 16; ++l) q6 += m.at("blk." + std::to_string(l) + ".ffn_down.weight").type == GgmlType::Q6_K;
  EXPECT_EQ(q6, 8);  // about half of the layers
  auto f16 = plan_map("llama-3.2-1b", "f16");
  EXPECT_EQ(f16.at("blk.0.attn_q.weight").type, GgmlType::F16);
  EXPECT_EQ(f16.at("output_norm.weight").type, GgmlType::F32);
}

TEST(SynthPreset, QwenShapesBiasesTied) {
  auto m = plan_map("qwen2.5-0.5b", "q8_0");
  EXPECT_EQ(m.size(), 1u + 24u * 12u + 1u);
  EXPECT_EQ(m.count("output.weight"), 0u);
  EXPECT_EQ(m.at("blk.0.attn_q.bias").ne, (std::vector<int64_t>{896}));
  EXPECT_EQ(m.at("blk.0.attn_k.bias").ne, (std::vector<int64_t>{128}));
  EXPECT_EQ(m.at("blk.0.attn_v.bias").type, GgmlType::F32);
  EXPECT_EQ(m.at("blk.0.ffn_gate.weight").ne, (std::vector<int64_t>{896, 4864}));
  EXPECT_EQ(m.at("blk.0.ffn_gate.weight").type, GgmlType::Q8_0);
}

TEST(SynthRecipe, MoreBitsLayers) {
  int n = 0;
  for (int l = 0; l < 30; ++l) n += use_more_bits(l, 30);
  EXPECT_EQ(n, 15);
  EXPECT_TRUE(use_more_bits(0, 2));
  EXPECT_TRUE(use_more_bits(1, 2));
  EXPECT_EQ(tensor_layer_index("blk.17.attn_v.weight"), 17);
  EXPECT_EQ(tensor_layer_index("output.weight"), -1);
}

SynthSpec tiny_spec(const std::string& arch) {
  SynthSpec s;
  s.name = "tiny-" + arch;
  s.arch = arch;
  s.n_embd = 256;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 512;
  s.n_ctx = 256;
  s.qkv_bias = arch == "qwen2";
  s.tied_output = arch == "qwen2";
  if (arch == "qwen2") {
    s.rope_freq_base = 1e6f;
    s.rms_eps = 1e-6f;
  }
  return s;
}

void check_runs(const std::string& path, const SynthSpec& spec, GgmlType expect_q) {
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_EQ(hp.arch, spec.arch);
  EXPECT_EQ(hp.n_vocab, 32000);
  EXPECT_EQ(hp.n_embd, spec.n_embd);
  EXPECT_EQ(hp.n_head_kv, spec.n_head_kv);
  EXPECT_EQ(hp.qkv_bias, spec.qkv_bias);
  EXPECT_EQ((*model)->weights().tied_output, spec.tied_output);
  const GgufTensorInfo* q = (*model)->gguf().find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, expect_q);
  EXPECT_TRUE((*model)->gguf().find("tokenizer.ggml.tokens") != nullptr);
  auto logits = testing::model_logits(**model, {1, 450, 4996, 17354});
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  ASSERT_EQ(logits->size(), 4u * 32000u);
  for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(SynthModel, TinyLlamaEveryTypeLoadsAndRuns) {
  TempDir dir;
  const SynthSpec spec = tiny_spec("llama");
  const std::pair<const char*, GgmlType> cases[] = {
      {"f32", GgmlType::F32}, {"f16", GgmlType::F16}, {"q8_0", GgmlType::Q8_0},
      {"q4_0", GgmlType::Q4_0}, {"q4_k_m", GgmlType::Q4_K}};
  for (const auto& [type, expect] : cases) {
    SCOPED_TRACE(type);
    SynthOptions o;
    o.vocab_path = testing::default_vocab();
    o.seed = 3;
    const std::string path = dir.file(std::string("tiny-") + type + ".gguf");
    auto r = synth_model(spec, scheme(type), o, path);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->n_vocab, 32000);
    check_runs(path, spec, expect);
  }
}

TEST(SynthModel, TinyQwenWithBiasesAndTiedOutput) {
  TempDir dir;
  const SynthSpec spec = tiny_spec("qwen2");
  SynthOptions o;
  o.vocab_path = testing::default_vocab();
  const std::string path = dir.file("qwen.gguf");
  auto r = synth_model(spec, scheme("q4_k_m"), o, path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  check_runs(path, spec, GgmlType::Q4_K);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->get_int_or("general.file_type", -1), 15);
  EXPECT_EQ((*f)->find_tensor("token_embd.weight")->type, GgmlType::Q6_K);
  EXPECT_EQ((*f)->find_tensor("blk.1.attn_v.bias")->type, GgmlType::F32);
  EXPECT_FLOAT_EQ(float((*f)->get_float_or("qwen2.rope.freq_base", 0)), 1e6f);
}

TEST(SynthModel, DeterministicPerSeedAndThreadCount) {
  TempDir dir;
  SynthSpec spec = tiny_spec("llama");
  spec.n_layer = 1;
  SynthOptions o;
  o.vocab_path = testing::default_vocab();
  o.seed = 42;
  o.threads = 1;
  ASSERT_TRUE(synth_model(spec, scheme("q8_0"), o, dir.file("a.gguf")).ok());
  o.threads = 2;
  ASSERT_TRUE(synth_model(spec, scheme("q8_0"), o, dir.file("b.gguf")).ok());
  o.seed = 43;
  ASSERT_TRUE(synth_model(spec, scheme("q8_0"), o, dir.file("c.gguf")).ok());
  EXPECT_EQ(read_all(dir.file("a.gguf")), read_all(dir.file("b.gguf")));
  EXPECT_NE(read_all(dir.file("a.gguf")), read_all(dir.file("c.gguf")));
}

TEST(SynthModel, WeightStatistics) {
  TempDir dir;
  SynthSpec spec = tiny_spec("llama");
  spec.n_layer = 1;
  SynthOptions o;
  o.vocab_path = testing::default_vocab();
  ASSERT_TRUE(synth_model(spec, scheme("f32"), o, dir.file("f.gguf")).ok());
  auto f = GgufFile::open(dir.file("f.gguf"));
  ASSERT_TRUE(f.ok());
  const GgufTensorInfo* t = (*f)->find_tensor("token_embd.weight");
  const float* w = reinterpret_cast<const float*>(t->data);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < t->nelements(); ++i) {
    sum += w[i];
    sq += double(w[i]) * w[i];
  }
  const double n = double(t->nelements());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 2e-4);
  const float* norm = reinterpret_cast<const float*>((*f)->find_tensor("output_norm.weight")->data);
  EXPECT_EQ(norm[0], 1.0f);
  // Every tokenizer key of the vocab file was copied.
  auto vocab = GgufFile::open(testing::default_vocab());
  ASSERT_TRUE(vocab.ok());
  for (const auto& [key, value] : (*vocab)->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) {
      EXPECT_NE((*f)->find(key), nullptr) << key;
    }
  }
}

TEST(SynthModel, MissingVocabIsAnError) {
  TempDir dir;
  SynthOptions o;
  o.vocab_path = dir.file("no-such-vocab.gguf");
  auto r = synth_model(tiny_spec("llama"), scheme("q8_0"), o, dir.file("x.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no-such-vocab.gguf"), std::string::npos);
}

}  // namespace
}  // namespace kvserve
