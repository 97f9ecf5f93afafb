// The JSON-object mask (engine/json_constraint.h): one step's pass over a vocabulary's bytes, in
// a state where most tokens may follow (inside a string) and one where few may (a value expected).
// args: {vocabulary (0: llama-spm, 32,000 tokens; 1: Llama 3 BPE, 128,000), state (0: string,
// 1: value)}. The vocabularies are read from ../shared/models (KVS_BENCH_SHARED overrides).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "engine/json_constraint.h"
#include "gguf/gguf_file.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

std::string shared_dir() {
  const char* e = std::getenv("KVS_BENCH_SHARED");
  return e != nullptr ? e : "../shared";
}

std::unique_ptr<Tokenizer> load_vocab(int which) {
  if (which == 0) {
    auto f = GgufFile::open(shared_dir() + "/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
    if (!f.ok()) return nullptr;
    auto t = Tokenizer::from_gguf(**f);
    return t.ok() ? std::move(t).value() : nullptr;
  }
  const std::string dir = shared_dir() + "/models/llama3.2-bpe/";
  auto spec = read_bpe_files(dir + "encoder.json", dir + "vocab.bpe", "llama-bpe");
  if (!spec.ok()) return nullptr;
  auto t = Tokenizer::from_spec(std::move(spec).value());
  return t.ok() ? std::move(t).value() : nullptr;
}

void BM_json_mask(benchmark::State& state) {
  const std::unique_ptr<Tokenizer> tok = load_vocab(int(state.range(0)));
  if (tok == nullptr) return state.SkipWithError("vocabulary not found (KVS_BENCH_SHARED)");
  const ConstraintVocab vocab = ConstraintVocab::from(*tok);
  JsonConstraint c(vocab);
  // Drive the constraint into the state through tokens whose bytes are exactly the text.
  const std::string text = state.range(1) == 0 ? "{\"key\": \"some text" : "{\"key\":";
  for (char ch : text) {
    for (size_t id = 0; id < vocab.pieces.size(); ++id) {
      if (vocab.excluded[id] == 0 && vocab.pieces[id] == std::string(1, ch)) {
        c.accept(int32_t(id));
        break;
      }
    }
  }
  std::vector<uint8_t> allowed;
  size_t n_allowed = 0;
  for (auto _ : state) {
    c.allowed(&allowed);
    benchmark::DoNotOptimize(allowed.data());
  }
  for (uint8_t a : allowed) n_allowed += a;
  state.counters["allowed"] = double(n_allowed);
  state.counters["vocab"] = double(vocab.pieces.size());
}
BENCHMARK(BM_json_mask)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve
