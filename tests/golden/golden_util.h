// Shared helpers for the golden tests: fixture paths and the golden logits file format.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "engine/generator.h"

namespace kvserve::golden {

inline std::string shared_path(const std::string& rel) { return std::string(KVS_SHARED_DIR) + "/" + rel; }

// int32 n_tokens, int32 n_vocab, int32 tokens[n_tokens], float32 logits[n_tokens][n_vocab]
struct GoldenLogits {
  std::vector<int32_t> tokens;
  int32_t n_vocab = 0;
  std::vector<float> logits;
};

inline bool read_golden(const std::string& path, GoldenLogits* g) {
  std::ifstream in(path, std::ios::binary);
  int32_t hdr[2];
  if (!in.read(reinterpret_cast<char*>(hdr), sizeof hdr) || hdr[0] <= 0 || hdr[1] <= 0) return false;
  g->n_vocab = hdr[1];
  g->tokens.resize(size_t(hdr[0]));
  g->logits.resize(size_t(hdr[0]) * size_t(hdr[1]));
  return bool(in.read(reinterpret_cast<char*>(g->tokens.data()), std::streamsize(g->tokens.size() * 4))) &&
         bool(in.read(reinterpret_cast<char*>(g->logits.data()), std::streamsize(g->logits.size() * 4)));
}

// Normalised MSE: mean((a-b)^2) / mean(b^2), b the reference.
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? num / den : num;
}

inline std::unique_ptr<Generator> make(const std::string& model_rel, KvDType kv = KvDType::F32,
                                       bool use_cache = true, int64_t ctx = 0) {
  GeneratorOptions o;
  o.model_path = shared_path("models/" + model_rel);
  o.kv_type = kv;
  o.use_cache = use_cache;
  o.ctx = ctx;
  auto g = Generator::create(o);
  if (!g.ok()) return nullptr;
  return std::move(g).value();
}

}  // namespace kvserve::golden
