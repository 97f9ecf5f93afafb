#include "engine/model_fingerprint.h"

#include <xxhash.h>

#include <string_view>

namespace kvserve {
namespace {

// Streaming XXH3-128 with the few inputs the fingerprint needs.
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) { XXH3_128bits_reset(state_); }
  ~Hasher() { XXH3_freeState(state_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void bytes(const void* p, size_t n) { XXH3_128bits_update(state_, p, n); }
  // Length-prefixed, so "ab"+"c" and "a"+"bc" differ.
  void str(std::string_view s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
  template <typename T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
  BlockHash digest() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_);
    BlockHash out{h.high64, h.low64};
    if (out.empty()) out.lo = 1;  // {0,0} means "no hash" in the pool
    return out;
  }

 private:
  XXH3_state_t* state_;
};

void hash_value(Hasher& h, const GgufValue& v) {
  h.pod(uint32_t(v.type));
  h.pod(v.i);
  h.pod(v.u);
  h.pod(v.f);
  h.pod(uint8_t(v.b));
  h.str(v.str);
  h.pod(uint32_t(v.elem_type));
  h.pod(uint64_t(v.arr_str.size()));
  for (const std::string& s : v.arr_str) h.str(s);
  h.pod(uint64_t(v.arr_int.size()));
  if (!v.arr_int.empty()) h.bytes(v.arr_int.data(), v.arr_int.size() * sizeof(int64_t));
  h.pod(uint64_t(v.arr_float.size()));
  if (!v.arr_float.empty()) h.bytes(v.arr_float.data(), v.arr_float.size() * sizeof(double));
  h.pod(uint64_t(v.arr_nested.size()));
  for (const GgufValue& n : v.arr_nested) hash_value(h, n);
}

}  // namespace

BlockHash model_fingerprint(const Model& model) {
  const GgufFile& f = model.gguf();
  Hasher h;
  h.str("kvserve-model-v1");
  // Shapes, types and the weights' bytes of every tensor.
  for (const GgufTensorInfo& t : f.tensors()) {
    h.str(t.name);
    h.pod(uint32_t(t.type));
    for (int64_t d : t.ne) h.pod(d);
    h.bytes(t.data, t.nbytes);
  }
  // Every metadata entry (architecture, hyper-parameters, vocabulary), nested arrays included.
  for (const auto& [key, value] : f.metadata()) {
    h.str(key);
    hash_value(h, value);
  }
  const ModelHparams& hp = model.hparams();
  h.str(hp.arch);
  for (int v : {hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.rope_dim,
                int(hp.rope_neox), int(hp.qkv_bias)})
    h.pod(int32_t(v));
  for (float v : {hp.rope_freq_base, hp.rope_freq_scale, hp.rms_eps}) h.pod(v);
  return h.digest();
}

BlockHash prefix_namespace(const BlockHash& fingerprint, const std::string& kv_signature,
                           const std::string& cache_salt) {
  Hasher h;
  h.str("kvserve-ns-v1");
  h.pod(fingerprint.hi);
  h.pod(fingerprint.lo);
  h.str(kv_signature);
  h.str(cache_salt);
  return h.digest();
}

}  // namespace kvserve
