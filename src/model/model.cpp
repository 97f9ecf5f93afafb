#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "kernels/vec_dot.h"
#include "tensor/quants.h"
#include "util/cpu_budget.h"
#include "util/huge_pages.h"

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
  const char* repack = std::getenv("KVSERVE_REPACK");
  if (repack == nullptr || std::strcmp(repack, "0") != 0) m->repack_weights();
  m->copy_file_views();
  return m;
}

namespace {

// Drops this process's mapping of the whole pages inside [p, p + n) of the read-only file mapping
// (they are read again from the file should anything touch them): the packed copy replaces them,
// and without this both would count in the resident set.
void release_file_pages(const void* p, size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const auto begin = round_up_to(reinterpret_cast<uintptr_t>(p), page);
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

void Model::repack_weights() {
  const KernelTable& k = active_kernels();
  // One matrix each, or (pair set) a layer's gate and up packed as one (pack_weight_pair).
  struct Job {
    WeightMatrix* m = nullptr;
    LayerWeights* pair = nullptr;
    size_t bytes = 0;
  };
  std::vector<Job> jobs;
  for (LayerWeights& L : w_.layers) {  // in the order a decode step reads them
    for (WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo})
      jobs.push_back({m, nullptr, packed_weight_bytes(k, *m)});
    if (const size_t pb = packed_pair_bytes(k, L.w_gate, L.w_up); pb > 0) {
      jobs.push_back({nullptr, &L, pb});
    } else {
      for (WeightMatrix* m : {&L.w_gate, &L.w_up}) jobs.push_back({m, nullptr, packed_weight_bytes(k, *m)});
    }
    jobs.push_back({&L.w_down, nullptr, packed_weight_bytes(k, L.w_down)});
  }
  jobs.push_back({&w_.output, nullptr, packed_weight_bytes(k, w_.output)});
  size_t total = 0;
  for (const Job& j : jobs) total += round_up_to(j.bytes, 64);
  if (total == 0) return;
  // On huge pages when that big (util/huge_pages.h): the GEMM streams these bytes every decode step.
  const size_t align = huge_page_alignment(total, 64);
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(align, round_up_to(total, align)));
  if (buf == nullptr) return;  // not fatal: the file layout works, only slower
  advise_huge_pages(buf, round_up_to(total, align), align);
  packed_.reset(buf);
  packed_bytes_ = total;
  // Each matrix's place in the buffer, then the matrices packed by all cores (a 1B-parameter
  // Q4_K_M model takes ~1.6 s on one): each writes only its own range.
  std::vector<uint8_t*> dst(jobs.size(), nullptr);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].bytes == 0) continue;
    dst[i] = buf;
    buf += round_up_to(jobs[i].bytes, 64);
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      if (dst[i] == nullptr) continue;
      if (LayerWeights* L = jobs[i].pair) {
        L->w_gate_up = pack_weight_pair(k, L->w_gate, L->w_up, dst[i]);
        for (const WeightMatrix* m : {&L->w_gate, &L->w_up})
          release_file_pages(m->data, m->row_bytes * size_t(m->rows));
        continue;
      }
      WeightMatrix* m = jobs[i].m;
      pack_weight(k, m, dst[i]);
      if (!(m == &w_.output && w_.tied_output)) release_file_pages(m->data, m->row_bytes * size_t(m->rows));
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < usable_cpus(); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
}

void Model::copy_file_views() {
  const KernelTable& k = active_kernels();
  // What the forward pass still reads through `data`: the embedding rows (get_rows), and every
  // matrix without a packed copy for the table it runs on.
  const auto unpacked = [&](const WeightMatrix& m) { return !is_packed_for(m, k); };
  std::vector<WeightMatrix*> views;
  // A tied embedding whose output copy is packed in a layout get_rows can read takes its rows from
  // there (PackedKernels::unpack_row): no second copy in memory, and rows from a matrix every
  // decode step streams. A copy of its own is touched only by the tokens looked up: on the Intel
  // Xeon VM of docs/benchmarks.md, in 4 KiB pages, a lookup stalled 100-200 us about every other
  // time (smollm-135m batch 8: ~0.4 ms a step).
  if (w_.tied_output && !unpacked(w_.output) && k.packed[int(w_.output.type)].unpack_row != nullptr) {
    w_.tok_embd.packed = w_.output.packed;
    w_.tok_embd.packed_for = &k;
    // Packing read these file pages and kept them (tied: the embedding was still to come).
    release_file_pages(w_.tok_embd.data, w_.tok_embd.row_bytes * size_t(w_.tok_embd.rows));
  } else {
    views.push_back(&w_.tok_embd);
  }
  if (!w_.tied_output && unpacked(w_.output)) views.push_back(&w_.output);
  for (LayerWeights& L : w_.layers) {
    // gate and up paired for this table are read only through w_gate_up.
    const bool paired = is_packed_for(L.w_gate_up, k);
    for (WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      if (unpacked(*m) && !(paired && (m == &L.w_gate || m == &L.w_up))) views.push_back(m);
  }
  size_t total = 0;
  for (const WeightMatrix* m : views) total += round_up_to(m->row_bytes * size_t(m->rows), 64);
  if (total == 0) return;
  // On huge pages when that big, as the packed copy: besides the TLB, on the Intel Xeon VM a 4 KiB
  // page left untouched for a fraction of a second cost 10-50 us on its next touch (the host's
  // doing; no guest fault), and an embedding's rows are touched only when their tokens come up
  // (docs/benchmarks.md, "Embedding rows from the packed output").
  const size_t align = huge_page_alignment(total, 64);
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(align, round_up_to(total, align)));
  if (buf == nullptr) return;  // not fatal: the file's pages serve, as long as the file stays as it is
  advise_huge_pages(buf, round_up_to(total, align), align);
  owned_.reset(buf);
  owned_bytes_ = total;
  for (WeightMatrix* m : views) {
    const size_t bytes = m->row_bytes * size_t(m->rows);
    std::memcpy(buf, m->data, bytes);
    release_file_pages(m->data, bytes);
    m->data = buf;
    buf += round_up_to(bytes, 64);
  }
  if (w_.tied_output) w_.output.data = w_.tok_embd.data;  // the same rows; its packed copy is unchanged
}

size_t Model::weight_bytes() const {
  auto bytes = [](const WeightMatrix& m) { return m.row_bytes * size_t(m.rows); };
  size_t total = w_.output.row_bytes * size_t(w_.output.rows) + w_.tok_embd.row_bytes;
  for (const auto& L : w_.layers)
    total += bytes(L.wq) + bytes(L.wk) + bytes(L.wv) + bytes(L.wo) + bytes(L.w_gate) + bytes(L.w_up) + bytes(L.w_down);
  return total;
}

}  // namespace kvserve
