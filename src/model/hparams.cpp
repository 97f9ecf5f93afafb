#include "model/hparams.h"

#include <cmath>

namespace kvserve {
namespace {

std::string supported_list() {
  std::string s;
  for (const char* a : kSupportedArchitectures) s += (s.empty() ? "" : ", ") + std::string(a);
  return s;
}

Status require_positive(const GgufFile& f, const std::string& key, int64_t v, int64_t max = 1 << 24) {
  if (v <= 0 || v > max)
    return corrupt(f.path() + ": " + key + " = " + std::to_string(v) + " is out of range (1.." +
                   std::to_string(max) + ")");
  return {};
}

}  // namespace

Expected<ModelHparams> load_hparams(const GgufFile& f) {
  ModelHparams hp;
  KVS_ASSIGN_OR_RETURN(hp.arch, f.get_string("general.architecture"));
  bool known = false;
  for (const char* a : kSupportedArchitectures) known |= hp.arch == a;
  if (!known)
    return unsupported(f.path() + ": unknown architecture '" + hp.arch + "' (supported: " + supported_list() + ")");
  hp.name = f.get_string_or("general.name", "");
  const std::string p = hp.arch + ".";

  KVS_ASSIGN_OR_RETURN(int64_t n_embd, f.get_int(p + "embedding_length"));
  KVS_ASSIGN_OR_RETURN(int64_t n_layer, f.get_int(p + "block_count"));
  KVS_ASSIGN_OR_RETURN(int64_t n_head, f.get_int(p + "attention.head_count"));
  KVS_ASSIGN_OR_RETURN(int64_t n_ff, f.get_int(p + "feed_forward_length"));
  int64_t n_head_kv = f.get_int_or(p + "attention.head_count_kv", n_head);
  KVS_RETURN_IF_ERROR(require_positive(f, p + "embedding_length", n_embd));
  KVS_RETURN_IF_ERROR(require_positive(f, p + "block_count", n_layer, 4096));
  KVS_RETURN_IF_ERROR(require_positive(f, p + "attention.head_count", n_head, 4096));
  KVS_RETURN_IF_ERROR(require_positive(f, p + "attention.head_count_kv", n_head_kv, 4096));
  KVS_RETURN_IF_ERROR(require_positive(f, p + "feed_forward_length", n_ff));
  if (n_head % n_head_kv != 0)
    return corrupt(f.path() + ": attention.head_count (" + std::to_string(n_head) +
                   ") is not a multiple of attention.head_count_kv (" + std::to_string(n_head_kv) + ")");
  int64_t head_dim = f.get_int_or(p + "attention.key_length", n_embd / n_head);
  KVS_RETURN_IF_ERROR(require_positive(f, p + "attention.key_length", head_dim, 1024));
  if (f.get_int_or(p + "attention.value_length", head_dim) != head_dim)
    return unsupported(f.path() + ": attention.value_length differs from key_length");
  int64_t rope_dim = f.get_int_or(p + "rope.dimension_count", head_dim);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return corrupt(f.path() + ": " + p + "rope.dimension_count = " + std::to_string(rope_dim) +
                   " must be even and at most the head dimension " + std::to_string(head_dim));

  hp.n_embd = int(n_embd);
  hp.n_layer = int(n_layer);
  hp.n_head = int(n_head);
  hp.n_head_kv = int(n_head_kv);
  hp.n_ff = int(n_ff);
  hp.head_dim = int(head_dim);
  hp.rope_dim = int(rope_dim);
  hp.n_ctx_train = int(f.get_int_or(p + "context_length", 2048));
  if (hp.n_ctx_train <= 0) hp.n_ctx_train = 2048;
  hp.rope_freq_base = float(f.get_float_or(p + "rope.freq_base", 10000.0));
  hp.rms_eps = float(f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(hp.rope_freq_base > 0) || !(hp.rms_eps >= 0) || !std::isfinite(hp.rms_eps))
    return corrupt(f.path() + ": rope.freq_base / layer_norm_rms_epsilon out of range");

  // Linear RoPE scaling: either rope.scaling.{type,factor} or the older rope.scale_linear.
  std::string scaling = f.get_string_or(p + "rope.scaling.type", "none");
  double factor = f.get_float_or(p + "rope.scaling.factor", 0.0);
  if (scaling == "linear" && factor > 0) hp.rope_freq_scale = float(1.0 / factor);
  double scale_linear = f.get_float_or(p + "rope.scale_linear", 0.0);
  if (scale_linear > 0) hp.rope_freq_scale = float(1.0 / scale_linear);
  if (scaling != "none" && scaling != "linear" && scaling != "llama3")
    return unsupported(f.path() + ": " + p + "rope.scaling.type '" + scaling + "' (supported: none, linear)");

  hp.sliding_window = f.get_int_or(p + "attention.sliding_window", 0);
  if (hp.sliding_window < 0)
    return corrupt(f.path() + ": " + p + "attention.sliding_window = " + std::to_string(hp.sliding_window) +
                   " is negative");
  hp.rope_neox = hp.arch == "qwen2";
  hp.qkv_bias = hp.arch == "qwen2";

  // Vocabulary size: the token list is authoritative; token_embd's shape is checked by the loader.
  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens")) hp.n_vocab = int(toks->array_size());
  hp.n_vocab = int(f.get_int_or(p + "vocab_size", hp.n_vocab));
  return hp;
}

}  // namespace kvserve
