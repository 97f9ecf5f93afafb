// kvserve perplexity: the chunked method of ../shared/golden/README.md. The text is tokenized
// with BOS, cut into consecutive chunks of -c tokens (the tail dropped); each chunk is evaluated
// on its own with its first token replaced by BOS, and only its second half is scored:
// positions j = c/2 .. c-2 add -log p(token[j+1] | tokens[0..j]). PPL = exp(mean).
//
// --kl-base FILE compares whole next-token distributions with a reference run (the KV
// quantization report): when FILE does not exist, the log-probabilities of every scored
// position are saved there; when it does, the run's mean/max KL(reference || this run) and
// top-1 agreement are printed. File layout (little-endian):
//   "KVSKLB01" | int32 n_vocab | int64 positions | float32 log-probs [positions][n_vocab]
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "engine/logit_stats.h"

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

constexpr char kKlMagic[8] = {'K', 'V', 'S', 'K', 'L', 'B', '0', '1'};

// The reference log-probabilities of a --kl-base file, or a message saying why not.
bool read_kl_base(const std::string& path, int n_vocab, std::vector<float>* rows, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  int32_t vocab = 0;
  int64_t positions = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&vocab), sizeof vocab);
  in.read(reinterpret_cast<char*>(&positions), sizeof positions);
  if (!in || std::memcmp(magic, kKlMagic, 8) != 0) return *why = path + " is not a kvserve KL base file", false;
  if (vocab != n_vocab)
    return *why = path + " holds a vocabulary of " + std::to_string(vocab) + ", the model has " +
                  std::to_string(n_vocab), false;
  if (positions < 0 || positions > (int64_t(1) << 40) / n_vocab) return *why = path + ": bad position count", false;
  rows->resize(size_t(positions) * size_t(n_vocab));
  in.read(reinterpret_cast<char*>(rows->data()), std::streamsize(rows->size() * sizeof(float)));
  if (!in) return *why = path + " is truncated", false;
  return true;
}

bool write_kl_base(const std::string& path, int n_vocab, const std::vector<float>& rows) {
  std::ofstream out(path, std::ios::binary);
  const int32_t vocab = n_vocab;
  const int64_t positions = int64_t(rows.size() / size_t(n_vocab));
  out.write(kKlMagic, 8);
  out.write(reinterpret_cast<const char*>(&vocab), sizeof vocab);
  out.write(reinterpret_cast<const char*>(&positions), sizeof positions);
  out.write(reinterpret_cast<const char*>(rows.data()), std::streamsize(rows.size() * sizeof(float)));
  return bool(out);
}

}  // namespace

Runner add_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "perplexity of a model on a text file");
  struct Opts {
    EngineFlags engine;
    std::string file;
    int chunk = 128;
    std::string kl_base;
  };
  auto o = std::make_shared<Opts>();
  add_engine_flags(cmd, &o->engine, false);
  add_context_flags(cmd, &o->engine);
  cmd->add_option("-f,--file", o->file, "text file")->required();
  cmd->add_option("-c,--chunk", o->chunk, "tokens per chunk")->capture_default_str();
  cmd->add_option("--kl-base", o->kl_base,
                  "reference log-probabilities: saved here when the file does not exist, else compared (KL divergence)");

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
    auto gen = make_generator(o->engine, o->chunk);  // each chunk runs alone: it is all the cache holds
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
    // KL mode: `base` holds the reference rows when comparing; `mine` collects this run's rows
    // when saving. Rows follow the scoring order.
    const bool kl = !o->kl_base.empty();
    const bool kl_compare = kl && std::ifstream(o->kl_base).good();
    std::vector<float> base, mine;
    if (kl_compare) {
      std::string why;
      if (!read_kl_base(o->kl_base, n_vocab, &base, &why)) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 1;
      }
      // Each chunk scores positions c/2 .. c-2: known before any is computed, so a base from
      // another file or -c is refused at once rather than after the whole run.
      const size_t positions = num_chunks * size_t(c - 1 - c / 2);
      if (positions * size_t(n_vocab) != base.size()) {
        std::fprintf(stderr, "error: %s holds %zu positions, this run would score %zu (same file and -c?)\n",
                     o->kl_base.c_str(), base.size() / size_t(n_vocab), positions);
        return 1;
      }
    }
    KlAccumulator kla;
    std::vector<float> row(static_cast<size_t>(n_vocab));
    size_t kl_pos = 0;
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
        const float* lg = logits->data() + size_t(j) * size_t(n_vocab);
        nll += neg_log_prob(lg, n_vocab, chunk[size_t(j) + 1]);
        ++count;
        if (!kl) continue;
        log_softmax({lg, size_t(n_vocab)}, row);
        if (!kl_compare) {
          mine.insert(mine.end(), row.begin(), row.end());
        } else {  // the base holds exactly this run's positions (checked before the first chunk)
          kla.add({base.data() + kl_pos * size_t(n_vocab), size_t(n_vocab)}, row);
        }
        ++kl_pos;
      }
      std::fprintf(stderr, "[%zu/%zu] running PPL = %.4f\n", ci + 1, num_chunks, std::exp(nll / double(count)));
    }
    std::printf("chunks: %zu of %d tokens, scored tokens: %zu\n", num_chunks, c, count);
    std::printf("PPL = %.4f\n", std::exp(nll / double(count)));
    if (kl && !kl_compare) {
      if (!write_kl_base(o->kl_base, n_vocab, mine)) {
        std::fprintf(stderr, "error: cannot write %s\n", o->kl_base.c_str());
        return 1;
      }
      std::printf("KL base saved: %s (%zu positions)\n", o->kl_base.c_str(), kl_pos);
    } else if (kl_compare) {
      std::printf("KL mean = %.6g, KL max = %.6g, top-1 agreement = %.2f%% (%lld positions)\n", kla.mean(), kla.max(),
                  100.0 * kla.top1_agreement(), static_cast<long long>(kla.count()));
    }
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_perplexity, 50);

}  // namespace kvserve::cli
