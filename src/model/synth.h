// Random-weight models with the shapes of real ones (`kvserve synth`): benchmark and test inputs
// that need no downloaded checkpoint. Weights ~ N(0, 0.02^2), norms = 1, biases ~ N(0, 0.01^2);
// the tokenizer (every tokenizer.* key) is copied from a vocab-only GGUF, whose token count sets
// n_vocab. The output is deterministic for a given seed, whatever the thread count: every row
// draws from its own generator seeded by (seed, tensor, row).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/quantize_model.h"
#include "util/status.h"

namespace kvserve {

struct SynthSpec {
  std::string name;         // general.name, also the preset name
  std::string arch = "llama";  // llama | qwen2
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  int n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool qkv_bias = false;     // qwen2: blk.N.attn_{q,k,v}.bias
  bool tied_output = false;  // no output.weight: token_embd doubles as the output projection
};

// smollm-135m, qwen2.5-0.5b, llama-3.2-1b; invalid_argument naming them otherwise.
Expected<SynthSpec> synth_preset(const std::string& name);
std::vector<std::string> synth_preset_names();

// One tensor the model will hold, in file order.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] inner
  GgmlType type;
  enum class Init { kWeight, kOnes, kBias } init;
};
// The tensor list of `spec` with `n_vocab` tokens under `scheme` (no weights drawn): what
// synth_model writes, for dry runs and tests.
std::vector<SynthTensor> synth_tensor_plan(const SynthSpec& spec, int n_vocab, const QuantScheme& scheme);

struct SynthOptions {
  std::string vocab_path;  // vocab GGUF whose tokenizer.* keys are copied
  uint64_t seed = 0;
  int threads = 0;  // <= 0: one per core
};

struct SynthResult {
  int n_vocab = 0;
  int64_t num_params = 0;
  uint64_t file_bytes = 0;
};

// Writes the model to `out_path`. on_tensor (optional) is called after each tensor is encoded.
Expected<SynthResult> synth_model(const SynthSpec& spec, const QuantScheme& scheme, const SynthOptions& opts,
                                  const std::string& out_path,
                                  const std::function<void(const SynthTensor&)>& on_tensor = {});

}  // namespace kvserve
