// Random-weight model generation (see synth.h).
#include "model/synth.h"

#include <cmath>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tensor/quants.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

constexpr float kWeightStd = 0.02f;
constexpr float kBiasStd = 0.01f;

// Shapes from the models' published configs. SmolLM-135M ties its embeddings like the real
// checkpoint does, as do Qwen2.5-0.5B and Llama-3.2-1B.
const SynthSpec kPresets[] = {
    {"smollm-135m", "llama", 576, 30, 9, 3, 1536, 2048, 10000.0f, 1e-5f, false, true},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 32768, 1000000.0f, 1e-6f, true, true},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, false, true},
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills dst with N(0, std^2) samples (Box-Muller on a splitmix64 stream). Our own generator
// rather than <random>'s distributions, whose output differs between standard libraries. Single
// precision and one 64-bit draw per pair (two 32-bit uniforms): drawing the numbers dominates
// synth's time, and f32 is the precision the weights are stored in anyway.
void fill_normal(uint64_t state, float std, float* dst, int64_t n) {
  constexpr float kTwoPi = 6.2831853f;
  constexpr float kInv32 = 1.0f / 4294967296.0f;  // 2^-32
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t bits = splitmix64(state);
    const float u1 = (float(uint32_t(bits) >> 8) + 1.0f) * (kInv32 * 256.0f);  // (0, 1]: log finite
    const float u2 = float(bits >> 32) * kInv32;
    const float r = std::sqrt(-2.0f * std::log(u1)) * std;
    dst[i] = r * std::cos(kTwoPi * u2);
    if (i + 1 < n) dst[i + 1] = r * std::sin(kTwoPi * u2);
  }
}

void add_hparams(GgufWriter& w, const SynthSpec& s, const QuantScheme& scheme) {
  const std::string p = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_string("general.name", s.name + " (random weights)");
  w.add_uint32("general.file_type", scheme.file_type);
  w.add_uint32(p + "context_length", uint32_t(s.n_ctx));
  w.add_uint32(p + "embedding_length", uint32_t(s.n_embd));
  w.add_uint32(p + "block_count", uint32_t(s.n_layer));
  w.add_uint32(p + "feed_forward_length", uint32_t(s.n_ff));
  w.add_uint32(p + "attention.head_count", uint32_t(s.n_head));
  w.add_uint32(p + "attention.head_count_kv", uint32_t(s.n_head_kv));
  w.add_float32(p + "rope.freq_base", s.rope_freq_base);
  w.add_float32(p + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.add_uint32(p + "rope.dimension_count", uint32_t(s.n_embd / s.n_head));
}

Status check_spec(const SynthSpec& s) {
  if (s.arch != "llama" && s.arch != "qwen2") return invalid_argument("synth: unsupported architecture " + s.arch);
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 || s.n_ctx <= 0)
    return invalid_argument("synth: every size of spec '" + s.name + "' must be positive");
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_head_kv != 0)
    return invalid_argument("synth: n_embd must divide by n_head and n_head by n_head_kv");
  return Status::ok_status();
}

}  // namespace

std::vector<std::string> synth_preset_names() {
  std::vector<std::string> names;
  for (const SynthSpec& s : kPresets) names.push_back(s.name);
  return names;
}

Expected<SynthSpec> synth_preset(const std::string& name) {
  for (const SynthSpec& s : kPresets)
    if (s.name == name) return s;
  std::string valid;
  for (const std::string& n : synth_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
  return invalid_argument("unknown preset '" + name + "' (valid: " + valid + ")");
}

std::vector<SynthTensor> synth_tensor_plan(const SynthSpec& s, int n_vocab, const QuantScheme& scheme) {
  using Init = SynthTensor::Init;
  const int64_t head_dim = s.n_embd / s.n_head;
  const int64_t q_dim = head_dim * s.n_head, kv_dim = head_dim * s.n_head_kv;
  std::vector<SynthTensor> plan;
  auto add = [&](std::string name, std::vector<int64_t> ne, Init init) {
    GgmlType t = pick_tensor_type(scheme, name, ne, s.n_layer, s.tied_output);
    plan.push_back(SynthTensor{std::move(name), std::move(ne), t, init});
  };
  add("token_embd.weight", {s.n_embd, n_vocab}, Init::kWeight);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, Init::kOnes);
    add(p + "attn_q.weight", {s.n_embd, q_dim}, Init::kWeight);
    add(p + "attn_k.weight", {s.n_embd, kv_dim}, Init::kWeight);
    add(p + "attn_v.weight", {s.n_embd, kv_dim}, Init::kWeight);
    if (s.qkv_bias) {
      add(p + "attn_q.bias", {q_dim}, Init::kBias);
      add(p + "attn_k.bias", {kv_dim}, Init::kBias);
      add(p + "attn_v.bias", {kv_dim}, Init::kBias);
    }
    add(p + "attn_output.weight", {q_dim, s.n_embd}, Init::kWeight);
    add(p + "ffn_norm.weight", {s.n_embd}, Init::kOnes);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, Init::kWeight);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, Init::kWeight);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, Init::kWeight);
  }
  add("output_norm.weight", {s.n_embd}, Init::kOnes);
  if (!s.tied_output) add("output.weight", {s.n_embd, n_vocab}, Init::kWeight);
  return plan;
}

Expected<SynthResult> synth_model(const SynthSpec& spec, const QuantScheme& scheme, const SynthOptions& opts,
                                  const std::string& out_path,
                                  const std::function<void(const SynthTensor&)>& on_tensor) {
  KVS_RETURN_IF_ERROR(check_spec(spec));
  auto vocab = GgufFile::open(opts.vocab_path);
  if (!vocab.ok()) return not_found("synth: cannot read vocab file: " + vocab.status().message());
  const GgufValue* tokens = (*vocab)->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->array_size() == 0)
    return invalid_argument("synth: " + opts.vocab_path + " has no tokenizer.ggml.tokens");
  const int n_vocab = int(tokens->array_size());
  KVS_RETURN_IF_ERROR(GgufWriter::check_writable(out_path));  // before the tensors are drawn

  GgufWriter w;
  add_hparams(w, spec, scheme);
  for (const auto& [key, value] : (*vocab)->metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.add_value(key, value);

  ThreadPool pool(opts.threads);
  SynthResult res;
  res.n_vocab = n_vocab;
  const std::vector<SynthTensor> plan = synth_tensor_plan(spec, n_vocab, scheme);
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const SynthTensor& t = plan[ti];
    const int64_t ne0 = t.ne[0];
    const int64_t rows = t.ne.size() > 1 ? t.ne[1] : 1;
    // Mixing the tensor index into the seed keeps rows of different tensors independent.
    uint64_t tensor_seed = opts.seed * 0x100000001B3ull + ti;
    const uint64_t base = splitmix64(tensor_seed);
    std::vector<uint8_t> data = encode_rows(pool, t.type, ne0, rows, [&](int64_t r, float* dst) {
      if (t.init == SynthTensor::Init::kOnes) {
        for (int64_t i = 0; i < ne0; ++i) dst[i] = 1.0f;
        return;
      }
      uint64_t row_state = base ^ (uint64_t(r) * 0xD6E8FEB86659FD93ull);
      fill_normal(splitmix64(row_state), t.init == SynthTensor::Init::kBias ? kBiasStd : kWeightStd, dst, ne0);
    });
    res.num_params += ne0 * rows;
    w.add_tensor(t.name, t.type, t.ne, std::move(data));
    if (on_tensor) on_tensor(t);
  }
  KVS_RETURN_IF_ERROR(w.write_file(out_path));
  KVS_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> check, GgufFile::open(out_path));
  res.file_bytes = check->file_size();
  return res;
}

}  // namespace kvserve
