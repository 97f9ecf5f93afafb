// kvserve generate: text after a prompt, streamed to stdout; a timing summary on stderr.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "engine/context_policy.h"
#include "engine/sampler.h"
#include "util/units.h"

namespace kvserve::cli {

Runner add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate text after a prompt");
  struct Opts {
    EngineFlags engine;
    std::string prompt;
    SamplingParams sp;
    bool echo = false;
    bool no_bos = false;
    std::vector<std::string> logit_bias;  // "ID=BIAS"
  };
  auto o = std::make_shared<Opts>();
  add_engine_flags(cmd, &o->engine, true);
  o->sp.max_tokens = 128;
  cmd->add_option("-p,--prompt", o->prompt, "prompt text")->required();
  cmd->add_option("-n,--n-predict", o->sp.max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temp", o->sp.temperature, "temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sp.top_k, "top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sp.top_p, "top-p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sp.min_p, "min-p (0 = off)")->capture_default_str();
  // The server's ranges: a penalty of 0 would divide the logits by zero.
  cmd->add_option("--repeat-penalty", o->sp.repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 10.0));
  cmd->add_option("--repeat-last-n", o->sp.repeat_last_n, "penalty window (-1 = all)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option("--presence-penalty", o->sp.presence_penalty, "presence penalty")->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sp.frequency_penalty, "frequency penalty")->capture_default_str();
  cmd->add_option("--seed", o->sp.seed, "random seed")->capture_default_str();
  cmd->add_option("--stop", o->sp.stop, "stop string (repeatable)");
  cmd->add_option("--logit-bias", o->logit_bias,
                  "ID=BIAS: add BIAS (-100..100; -100 bans) to token ID's logit (repeatable)");
  cmd->add_flag("--ignore-eos", o->sp.ignore_eos, "do not stop at end-of-generation tokens");
  cmd->add_flag("--json", o->sp.json_object, "answer with one JSON object (stops when it closes)");
  cmd->add_flag("--echo", o->echo, "print the detokenized prompt first");
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS even if the model asks for it");
  add_context_flags(cmd, &o->engine);

  return [o]() -> int {
    if (o->sp.max_tokens < 0) {
      std::fprintf(stderr, "error: -n must be >= 0\n");
      return 2;
    }
    for (const std::string& entry : o->logit_bias) {
      const size_t eq = entry.find('=');
      char* id_end = nullptr;
      char* bias_end = nullptr;
      const long long id = eq == std::string::npos ? -1 : std::strtoll(entry.c_str(), &id_end, 10);
      const float bias = eq == std::string::npos ? 0 : std::strtof(entry.c_str() + eq + 1, &bias_end);
      if (eq == std::string::npos || id_end != entry.c_str() + eq || id < 0 || id > INT32_MAX ||
          eq + 1 == entry.size() || *bias_end != '\0') {
        std::fprintf(stderr, "error: --logit-bias: expected ID=BIAS (e.g. 13=-100), got '%s'\n",
                     entry.c_str());
        return 2;
      }
      o->sp.logit_bias.emplace_back(int32_t(id), bias);
    }
    if (!(o->sp.top_p > 0 && o->sp.top_p <= 1 && o->sp.min_p >= 0 && o->sp.min_p <= 1)) {
      std::fprintf(stderr, "error: --top-p must be in (0, 1] and --min-p in [0, 1]\n");
      return 2;
    }
    if (Status st = check_sampling_values(o->sp); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 2;
    }
    // No tokenizer yields more tokens than the text has bytes, plus BOS, a leading-space piece
    // and EOS: with -n that bounds what the run holds, so the KV arena need not span the whole
    // context (make_generator, GeneratorOptions::max_tokens_held).
    const int64_t most_tokens = int64_t(o->prompt.size()) + 3 + int64_t(o->sp.max_tokens);
    auto gen = make_generator(o->engine, most_tokens);
    if (!gen) return 1;
    const Tokenizer& tok = gen->tokenizer();
    if (Status st = check_logit_bias(o->sp, tok.n_vocab()); !st.ok()) {
      std::fprintf(stderr, "error: --logit-bias: %s\n",
                   st.message().substr(st.message().find(": ") + 2).c_str());
      return 2;
    }
    std::vector<int32_t> prompt = tok.encode(o->prompt, !o->no_bos, false);
    if (prompt.empty()) {
      std::fprintf(stderr, "error: the prompt encodes to no tokens\n");
      return 2;
    }
    auto policy = parse_context_overflow(o->engine.overflow);  // make_generator() checked it
    if (*policy != ContextOverflow::kError) {
      auto dropped =
          fit_prompt(*policy, prompt, o->sp.max_tokens, gen->context_length(), tok.bos_id(), o->engine.n_keep);
      if (!dropped.ok()) {
        std::fprintf(stderr, "error: %s\n", dropped.status().message().c_str());
        return 2;
      }
      if (*dropped > 0) std::fprintf(stderr, "note: dropped the %lld oldest prompt tokens\n", (long long)*dropped);
    }
    if (o->echo) {
      std::string shown;
      for (int32_t id : prompt) shown += tok.token_to_piece(id);
      std::fputs(shown.c_str(), stdout);
      std::fflush(stdout);
    }
    auto res = gen->generate(prompt, o->sp, [](const std::string& piece) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::fputc('\n', stdout);
    if (!res.ok()) {
      std::fprintf(stderr, "error: %s\n", res.status().message().c_str());
      return 1;
    }
    const GenerationResult& r = *res;
    const std::string k = o->engine.kv_type_k.empty() ? o->engine.kv_type : o->engine.kv_type_k;
    const std::string v = o->engine.kv_type_v.empty() ? o->engine.kv_type : o->engine.kv_type_v;
    const std::string kv_label = o->engine.no_cache ? "no" : (k == v ? k : "K " + k + " / V " + v);
    double pre = r.prefill_seconds > 0 ? double(r.prompt_tokens) / r.prefill_seconds : 0;
    double dec = r.decode_seconds > 0 ? double(r.tokens.size()) / r.decode_seconds : 0;
    std::fprintf(stderr,
                 "\nprompt tokens: %lld | prefill: %.1f tok/s | generated tokens: %zu | decode: %.1f tok/s | "
                 "KV bytes in use: %zu (%s, %s cache) | KV bytes peak: %zu | context shifts: %lld | finish: %s\n",
                 (long long)r.prompt_tokens, pre, r.tokens.size(), dec, r.kv_bytes_used,
                 format_bytes(r.kv_bytes_used).c_str(), kv_label.c_str(), r.kv_bytes_peak,
                 (long long)r.context_shifts, r.finish_reason.c_str());
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_generate, 20);

}  // namespace kvserve::cli
