// Transformer hyper-parameters read from GGUF metadata (`<arch>.*` keys).
#pragma once

#include <string>

#include "gguf/gguf_file.h"
#include "util/status.h"

namespace kvserve {

// Architectures this build can run; an unknown `general.architecture` gets an error listing them.
inline constexpr const char* kSupportedArchitectures[] = {"llama", "qwen2"};

struct ModelHparams {
  std::string arch;
  std::string name;  // general.name, if any
  int n_vocab = 0;
  int n_embd = 0;      // hidden size
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;   // GQA/MQA: n_head % n_head_kv == 0
  int head_dim = 0;    // <arch>.attention.key_length, else n_embd / n_head
  int n_ff = 0;
  int n_ctx_train = 0;  // <arch>.context_length
  int rope_dim = 0;     // <arch>.rope.dimension_count, else head_dim
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear scaling: positions are multiplied by this (1/factor)
  bool rope_neox = false;        // qwen2 rotates (i, i + d/2) pairs; llama rotates adjacent pairs
  float rms_eps = 1e-5f;
  bool qkv_bias = false;  // qwen2
  // <arch>.attention.sliding_window: each token attends to this many latest positions (itself
  // included) in every layer; 0 when the model has no window (attends to all).
  int64_t sliding_window = 0;

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and validates the hyper-parameters (positive sizes, head counts dividing evenly).
// Errors name the file and the key.
Expected<ModelHparams> load_hparams(const GgufFile& f);

}  // namespace kvserve
