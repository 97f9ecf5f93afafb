#include "model/model.h"

#include "tensor/quants.h"

namespace kvserve {
namespace {

// Looks up tensor `name`, checks its shape (ne[0] = cols/inner, ne[1] = rows) and encoding.
class TensorBinder {
 public:
  explicit TensorBinder(const GgufFile& f) : f_(f) {}

  const GgufTensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }

  Expected<WeightMatrix> matrix(const std::string& name, int64_t cols, int64_t rows) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) return not_found(f_.path() + ": missing tensor '" + name + "'");
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
      return corrupt(f_.path() + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected [" +
                     std::to_string(cols) + ", " + std::to_string(rows) + "]");
    if (!is_supported_weight_type(t->type))
      return unsupported(f_.path() + ": tensor '" + name + "' uses weight encoding " + ggml_type_name(t->type) +
                         ", which kvserve does not support (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                         "q5_1, q2_K, q3_K, q4_K, q5_K, q6_K)");
    WeightMatrix w;
    w.type = t->type;
    w.data = t->data;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = t->row_bytes();
    return w;
  }

  // A 1-D tensor of n elements converted to f32.
  Expected<std::vector<float>> vector(const std::string& name, int64_t n) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) return not_found(f_.path() + ": missing tensor '" + name + "'");
    if (t->nelements() != n || t->ne[0] != n)
      return corrupt(f_.path() + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected [" +
                     std::to_string(n) + "]");
    if (!is_supported_weight_type(t->type))
      return unsupported(f_.path() + ": tensor '" + name + "' has unsupported type " + ggml_type_name(t->type));
    std::vector<float> v(static_cast<size_t>(n));
    dequantize_row(t->type, t->data, v.data(), n);
    return v;
  }

 private:
  const GgufFile& f_;
};

}  // namespace

Expected<std::unique_ptr<Model>> Model::load(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> file, GgufFile::open(path));
  KVS_ASSIGN_OR_RETURN(ModelHparams hp, load_hparams(*file));
  auto m = std::unique_ptr<Model>(new Model());
  m->file_ = file;
  TensorBinder b(*file);

  const GgufTensorInfo* emb = b.find("token_embd.weight");
  if (!emb) return not_found(path + ": missing tensor 'token_embd.weight'");
  if (hp.n_vocab <= 0) hp.n_vocab = int(emb->ne[1]);
  if (emb->ne[1] != hp.n_vocab)
    return corrupt(path + ": token_embd.weight has " + std::to_string(emb->ne[1]) + " rows but the vocabulary has " +
                   std::to_string(hp.n_vocab) + " tokens");
  ModelWeights& w = m->w_;
  KVS_ASSIGN_OR_RETURN(w.tok_embd, b.matrix("token_embd.weight", hp.n_embd, hp.n_vocab));
  KVS_ASSIGN_OR_RETURN(w.output_norm, b.vector("output_norm.weight", hp.n_embd));
  if (b.find("output.weight")) {
    KVS_ASSIGN_OR_RETURN(w.output, b.matrix("output.weight", hp.n_embd, hp.n_vocab));
  } else {
    w.output = w.tok_embd;  // tied embeddings (qwen2, small llamas)
    w.tied_output = true;
  }
  if (b.find("rope_freqs.weight")) {
    KVS_ASSIGN_OR_RETURN(w.rope_factors, b.vector("rope_freqs.weight", hp.rope_dim / 2));
  }

  w.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    KVS_ASSIGN_OR_RETURN(L.attn_norm, b.vector(p + "attn_norm.weight", hp.n_embd));
    KVS_ASSIGN_OR_RETURN(L.wq, b.matrix(p + "attn_q.weight", hp.n_embd, hp.q_dim()));
    KVS_ASSIGN_OR_RETURN(L.wk, b.matrix(p + "attn_k.weight", hp.n_embd, hp.kv_dim()));
    KVS_ASSIGN_OR_RETURN(L.wv, b.matrix(p + "attn_v.weight", hp.n_embd, hp.kv_dim()));
    KVS_ASSIGN_OR_RETURN(L.wo, b.matrix(p + "attn_output.weight", hp.q_dim(), hp.n_embd));
    if (hp.qkv_bias || b.find(p + "attn_q.bias")) {
      KVS_ASSIGN_OR_RETURN(L.bq, b.vector(p + "attn_q.bias", hp.q_dim()));
      KVS_ASSIGN_OR_RETURN(L.bk, b.vector(p + "attn_k.bias", hp.kv_dim()));
      KVS_ASSIGN_OR_RETURN(L.bv, b.vector(p + "attn_v.bias", hp.kv_dim()));
    }
    KVS_ASSIGN_OR_RETURN(L.ffn_norm, b.vector(p + "ffn_norm.weight", hp.n_embd));
    KVS_ASSIGN_OR_RETURN(L.w_gate, b.matrix(p + "ffn_gate.weight", hp.n_embd, hp.n_ff));
    KVS_ASSIGN_OR_RETURN(L.w_up, b.matrix(p + "ffn_up.weight", hp.n_embd, hp.n_ff));
    KVS_ASSIGN_OR_RETURN(L.w_down, b.matrix(p + "ffn_down.weight", hp.n_ff, hp.n_embd));
  }
  m->hp_ = std::move(hp);
  return m;
}

size_t Model::weight_bytes() const {
  auto bytes = [](const WeightMatrix& m) { return m.row_bytes * size_t(m.rows); };
  size_t total = w_.output.row_bytes * size_t(w_.output.rows) + w_.tok_embd.row_bytes;
  for (const auto& L : w_.layers)
    total += bytes(L.wq) + bytes(L.wk) + bytes(L.wv) + bytes(L.wo) + bytes(L.w_gate) + bytes(L.w_up) + bytes(L.w_down);
  return total;
}

}  // namespace kvserve
