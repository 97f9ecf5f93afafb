// kvserve logits: every position's logits for a token sequence, in the golden binary format:
// int32 n_tokens, int32 n_vocab, int32 tokens[n_tokens], float32 logits[n_tokens][n_vocab] (LE).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands.h"

namespace kvserve::cli {

Runner add_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "write every position's logits to a binary file");
  struct Opts {
    EngineFlags engine;
    std::string prompt, tokens, out;
    bool no_bos = false;
    bool incremental = false;
  };
  auto o = std::make_shared<Opts>();
  add_engine_flags(cmd, &o->engine, false);
  add_context_flags(cmd, &o->engine);
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "text to tokenize");
  auto* t = cmd->add_option("--tokens", o->tokens, "comma-separated token ids (instead of -p)");
  p->excludes(t);
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS to -p text");
  cmd->add_flag("--incremental", o->incremental, "feed one token at a time through the KV cache");
  cmd->add_option("-o,--output", o->out, "output file")->required();

  return [o]() -> int {
    std::vector<int32_t> ids;
    if (!o->tokens.empty()) {
      if (!parse_token_list(o->tokens, &ids)) {
        std::fprintf(stderr, "error: --tokens must be a comma-separated list of non-negative integers\n");
        return 2;
      }
    } else if (o->prompt.empty()) {
      std::fprintf(stderr, "error: give -p TEXT or --tokens 1,2,3\n");
      return 2;
    }
    // The run holds its tokens at most (-p: no more than the text's bytes + BOS, a leading-space
    // piece and EOS), so the KV arena need not span the whole context.
    auto gen = make_generator(o->engine, ids.empty() ? int64_t(o->prompt.size()) + 3 : int64_t(ids.size()));
    if (!gen) return 1;
    if (ids.empty()) ids = gen->tokenizer().encode(o->prompt, !o->no_bos, false);
    auto logits = gen->eval_all(ids, o->incremental);
    if (!logits.ok()) {
      std::fprintf(stderr, "error: %s\n", logits.status().message().c_str());
      return 1;
    }
    FILE* f = std::fopen(o->out.c_str(), "wb");
    if (!f) {
      std::fprintf(stderr, "error: %s: cannot create: %s\n", o->out.c_str(), std::strerror(errno));
      return 1;
    }
    int32_t header[2] = {int32_t(ids.size()), gen->model().hparams().n_vocab};
    bool ok = std::fwrite(header, sizeof header, 1, f) == 1 &&
              std::fwrite(ids.data(), sizeof(int32_t), ids.size(), f) == ids.size() &&
              std::fwrite(logits->data(), sizeof(float), logits->size(), f) == logits->size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
      std::fprintf(stderr, "error: writing %s failed\n", o->out.c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %zu x %d logits to %s\n", ids.size(), header[1], o->out.c_str());
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_logits, 40);

}  // namespace kvserve::cli
