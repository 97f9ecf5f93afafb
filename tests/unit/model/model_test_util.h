// Helpers shared by the model tests: temp paths, the golden logits files, logits of a model.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

#include "kvcache/kv_storage.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace kvserve::testing {

inline std::string shared_path(const std::string& rel) { return std::string(KVS_SHARED_DIR) + "/" + rel; }
inline std::string default_vocab() { return shared_path("models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"); }

// A per-process scratch folder, removed by the test fixture that owns it.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("kvs_model_test_" + std::to_string(::getpid()) + "_" +
                                                      std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

struct GoldenLogits {
  std::vector<int32_t> tokens;
  int32_t n_vocab = 0;
  std::vector<float> logits;  // [tokens][n_vocab]
};

// Format: int32 n_tokens, int32 n_vocab, int32 tokens[n], float logits[n][n_vocab].
inline bool read_golden(const std::string& path, GoldenLogits* g) {
  std::ifstream in(path, std::ios::binary);
  int32_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), 4) || !in.read(reinterpret_cast<char*>(&g->n_vocab), 4)) return false;
  g->tokens.resize(size_t(n));
  g->logits.resize(size_t(n) * size_t(g->n_vocab));
  in.read(reinterpret_cast<char*>(g->tokens.data()), std::streamsize(n * 4));
  in.read(reinterpret_cast<char*>(g->logits.data()), std::streamsize(g->logits.size() * 4));
  return bool(in);
}

// The KV cache shape of model m: its layers, KV heads and head dim, with the given block size,
// element type and layout.
inline KvLayout model_kv_layout(const Model& m, int block_size, KvDType dtype = KvDType::F32,
                                bool tiled = false) {
  KvLayout l;
  l.num_layers = m.hparams().n_layer;
  l.num_kv_heads = m.hparams().n_head_kv;
  l.head_dim = m.hparams().head_dim;
  l.block_size = block_size;
  l.set_dtype(dtype);
  l.tiled = tiled;
  return l;
}

// Logits after every prefix of `tokens`, from one prefill over a fresh paged KV cache.
inline Expected<std::vector<float>> model_logits(const Model& m, const std::vector<int32_t>& tokens) {
  const KvLayout layout = model_kv_layout(m, 16);
  const int32_t num_blocks = int32_t((tokens.size() + 15) / 16);
  KVS_ASSIGN_OR_RETURN(KvStorage kv, KvStorage::create(layout, num_blocks));
  ThreadPool pool(2);
  ForwardPass fp(m, kv, pool);
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  std::iota(table.begin(), table.end(), 0);
  ForwardBatch batch;
  batch.tokens = tokens;
  SeqChunk c;
  c.start_pos = 0;
  c.num_tokens = int32_t(tokens.size());
  c.block_table = table;
  c.all_logits = true;
  batch.chunks.push_back(c);
  std::vector<float> logits;
  KVS_RETURN_IF_ERROR(fp.run(batch, &logits));
  return logits;
}

// mean((a - b)^2) / mean(b^2)
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace kvserve::testing
