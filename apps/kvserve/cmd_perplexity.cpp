// kvserve perplexity: the chunked method of ../shared/golden/README.md. The text is tokenized
// with BOS, cut into consecutive chunks of -c tokens (the tail dropped); each chunk is evaluated
// on its own with its first token replaced by BOS, and only its second half is scored:
// positions j = c/2 .. c-2 add -log p(token[j+1] | tokens[0..j]). PPL = exp(mean).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"

namespace kvserve::cli {
namespace {

// -log softmax(row)[target], in double for a stable sum over many tokens.
double neg_log_prob(const float* row, int n_vocab, int32_t target) {
  float max = row[0];
  for (int i = 1; i < n_vocab; ++i) max = std::max(max, row[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(row[i]) - max);
  return -(double(row[target]) - max - std::log(sum));
}

}  // namespace

Runner add_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "perplexity of a model on a text file");
  struct Opts {
    EngineFlags engine;
    std::string file;
    int chunk = 128;
  };
  auto o = std::make_shared<Opts>();
  add_engine_flags(cmd, &o->engine, false);
  cmd->add_option("-f,--file", o->file, "text file")->required();
  cmd->add_option("-c,--chunk", o->chunk, "tokens per chunk")->capture_default_str();

  return [o]() -> int {
    if (o->chunk < 4) {
      std::fprintf(stderr, "error: -c must be at least 4\n");
      return 2;
    }
    std::ifstream in(o->file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "error: cannot read %s\n", o->file.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto gen = make_generator(o->engine);
    if (!gen) return 1;
    const Tokenizer& tok = gen->tokenizer();
    std::vector<int32_t> ids = tok.encode(ss.str(), true, false);
    const int c = o->chunk;
    const size_t num_chunks = ids.size() / size_t(c);
    if (num_chunks == 0) {
      std::fprintf(stderr, "error: %s has %zu tokens, fewer than one chunk of %d\n", o->file.c_str(), ids.size(), c);
      return 1;
    }
    const int n_vocab = gen->model().hparams().n_vocab;
    double nll = 0;
    size_t count = 0;
    for (size_t ci = 0; ci < num_chunks; ++ci) {
      std::vector<int32_t> chunk(ids.begin() + long(ci) * c, ids.begin() + long(ci + 1) * c);
      chunk[0] = tok.bos_id() >= 0 ? tok.bos_id() : chunk[0];
      auto logits = gen->eval_all(chunk);
      if (!logits.ok()) {
        std::fprintf(stderr, "error: %s\n", logits.status().message().c_str());
        return 1;
      }
      for (int j = c / 2; j <= c - 2; ++j) {
        nll += neg_log_prob(logits->data() + size_t(j) * size_t(n_vocab), n_vocab, chunk[size_t(j) + 1]);
        ++count;
      }
      std::fprintf(stderr, "[%zu/%zu] running PPL = %.4f\n", ci + 1, num_chunks, std::exp(nll / double(count)));
    }
    std::printf("chunks: %zu of %d tokens, scored tokens: %zu\n", num_chunks, c, count);
    std::printf("PPL = %.4f\n", std::exp(nll / double(count)));
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_perplexity, 50);

}  // namespace kvserve::cli
